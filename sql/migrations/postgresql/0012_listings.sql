-- proletarian-di schema, step 12 (listings) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE INDEX IF NOT EXISTS job_enqueued_at ON proletarian.job (enqueued_at, job_id);
CREATE INDEX IF NOT EXISTS archived_job_enqueued_at ON proletarian.archived_job (enqueued_at, job_id);
