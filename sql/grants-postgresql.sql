-- Least-privilege roles for proletarian-di on PostgreSQL (safe to run twice).
-- Run it as the owner of the schema, after sql/postgresql.sql. See docs/operations.md.
--
--   proletarian_worker    claims, reschedules and archives jobs:
--                         SELECT ... FOR UPDATE, UPDATE and DELETE on the job table,
--                         INSERT into the archive and its failed attempts
--                         (job_attempt), reads the paused queues, counts
--                         claims in job_claims (max_crashes), keeps its row
--                         among the live workers (job_workers, and prunes the
--                         rows of dead ones), sums up the archive's hours in
--                         job_hourly_outcomes (reading only the archive's queue,
--                         status and finished_at), takes the starts of rate-limited
--                         queues in job_rate_slots, keeps handlers' return values in
--                         job_results, releases and cancels the jobs that wait on
--                         the ones it ends (job_dependencies, job_blocked), and reads the schema's version
--                         at start. Nothing else: it
--                         cannot read archived payloads, pause a queue, create or
--                         drop tables, or enqueue. (`max_running` takes advisory locks,
--                         which need no grant.)
--   proletarian_enqueuer  enqueues jobs: INSERT on the job table, and SELECT on the
--                         three columns a unique key is looked up by (job_id,
--                         queue, unique_key): it cannot read payloads; writes the rows of
--                         jobs that wait on others (job_dependencies, job_blocked,
--                         job_workflows), and reads whether their parents have ended.
--                         (A job made to depend on jobs that have all ended already is
--                         released or cancelled by its enqueue: give such an enqueuer
--                         the worker's role too.)
--   proletarian_scheduler runs a scheduler of periodic jobs: reads and writes the
--                         schedules' table, enqueues their jobs, reads the
--                         schema's version.
--
-- All three are group roles without LOGIN; grant them to the login roles your
-- processes use, for example:
--   CREATE ROLE app_worker LOGIN PASSWORD '...' IN ROLE proletarian_worker;
--   CREATE ROLE app_web LOGIN PASSWORD '...' IN ROLE proletarian_enqueuer;
-- A worker whose handlers enqueue follow-up jobs needs both roles.
-- For other table names, replace proletarian.job / proletarian.archived_job
-- (and proletarian.job_periodic, proletarian.job_paused, proletarian.job_claims,
-- proletarian.job_workers, proletarian.job_hourly_outcomes, proletarian.job_rate_slots,
-- proletarian.job_results, proletarian.job_dependencies, proletarian.job_blocked,
-- proletarian.job_workflows,
-- proletarian.job_attempt
-- and its sequence,
-- proletarian.job_schema_version).

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'proletarian_worker') THEN
        CREATE ROLE proletarian_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'proletarian_enqueuer') THEN
        CREATE ROLE proletarian_enqueuer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'proletarian_scheduler') THEN
        CREATE ROLE proletarian_scheduler NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA proletarian
    TO proletarian_worker, proletarian_enqueuer, proletarian_scheduler;
GRANT SELECT, UPDATE, DELETE ON proletarian.job TO proletarian_worker;
GRANT INSERT ON proletarian.archived_job TO proletarian_worker;
GRANT SELECT ON proletarian.job_schema_version TO proletarian_worker;
GRANT SELECT ON proletarian.job_paused TO proletarian_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON proletarian.job_claims TO proletarian_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON proletarian.job_workers TO proletarian_worker;
GRANT SELECT (job_id, queue, status, finished_at) ON proletarian.archived_job TO proletarian_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON proletarian.job_hourly_outcomes TO proletarian_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON proletarian.job_rate_slots TO proletarian_worker;
GRANT SELECT, INSERT, DELETE ON proletarian.job_results TO proletarian_worker;
GRANT SELECT, UPDATE ON proletarian.job_dependencies TO proletarian_worker;
GRANT SELECT, DELETE ON proletarian.job_blocked TO proletarian_worker;
GRANT SELECT ON proletarian.job_workflows TO proletarian_worker;
GRANT INSERT ON proletarian.job_attempt TO proletarian_worker;
GRANT USAGE ON SEQUENCE proletarian.job_attempt_id_seq TO proletarian_worker;
GRANT INSERT ON proletarian.job TO proletarian_enqueuer;
GRANT SELECT (job_id, queue, unique_key) ON proletarian.job TO proletarian_enqueuer;
GRANT SELECT (job_id, status) ON proletarian.archived_job TO proletarian_enqueuer;
GRANT SELECT, INSERT, UPDATE ON proletarian.job_dependencies TO proletarian_enqueuer;
GRANT INSERT ON proletarian.job_blocked TO proletarian_enqueuer;
GRANT INSERT ON proletarian.job_workflows TO proletarian_enqueuer;
GRANT SELECT, INSERT, UPDATE ON proletarian.job_periodic TO proletarian_scheduler;
GRANT INSERT ON proletarian.job TO proletarian_scheduler;
GRANT SELECT ON proletarian.job_schema_version TO proletarian_scheduler;
