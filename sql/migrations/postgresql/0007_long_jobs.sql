-- proletarian-di schema, step 7 (long jobs) for PostgreSQL 9.5+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN leased_by TEXT;
CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      UUID PRIMARY KEY,     -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL      -- its claims, committed apart from its transaction
);
