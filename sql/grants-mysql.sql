-- Least-privilege roles for proletarian-di on MySQL 8.0.1+ / MariaDB 10.6+
-- (safe to run twice). Run it as an administrator after sql/mysql.sql.
-- See docs/operations.md.
--
--   proletarian_worker    claims, reschedules and archives jobs:
--                         SELECT ... FOR UPDATE, UPDATE and DELETE on the job table,
--                         INSERT into the archive (INSERT ... SELECT reads the job row)
--                         and its failed attempts (job_attempt), SELECT on the paused
--                         queues, counts claims in job_claims (max_crashes), keeps its
--                         row among the live workers (job_workers, and prunes the rows
--                         of dead ones), sums up the archive's hours in
--                         job_hourly_outcomes (reading only the archive's queue,
--                         status and finished_at), takes the starts of rate-limited
--                         queues in job_rate_slots, keeps handlers' return values in
--                         job_results, releases and cancels the jobs that wait on
--                         the ones it ends (job_dependencies, job_blocked). (`max_running` takes GET_LOCK
--                         locks, which need no grant.)
--   proletarian_enqueuer  enqueues jobs: INSERT on the job table, and SELECT on the
--                         three columns a unique key is looked up by (job_id,
--                         queue, unique_key): it cannot read payloads; writes the rows of
--                         jobs that wait on others (job_dependencies, job_blocked,
--                         job_workflows), and reads whether their parents have ended.
--                         (A job made to depend on jobs that have all ended already is
--                         released or cancelled by its enqueue: give such an enqueuer
--                         the worker's role too.) (MySQL
--                         8.0.22+ also wants UPDATE for the locking read a
--                         duplicate key may take; MariaDB does not.)
--   proletarian_scheduler runs a scheduler of periodic jobs: reads and writes the
--                         schedules' table, enqueues their jobs.
--
-- Grant a role to a login user and make it the user's default role:
--   CREATE USER 'app_worker'@'%' IDENTIFIED BY '...';
--   GRANT proletarian_worker TO 'app_worker'@'%';
--   SET DEFAULT ROLE proletarian_worker FOR 'app_worker'@'%';   -- MariaDB
--   SET DEFAULT ROLE proletarian_worker TO 'app_worker'@'%';    -- MySQL 8
-- A worker whose handlers enqueue follow-up jobs needs both roles
-- (MySQL 8: SET DEFAULT ROLE ALL TO ...; MariaDB has one default role, so grant
-- the enqueuer's INSERT to proletarian_worker as well, or to the user).
-- For other table names, replace proletarian.job / proletarian.archived_job.

CREATE ROLE IF NOT EXISTS proletarian_worker;
CREATE ROLE IF NOT EXISTS proletarian_enqueuer;
CREATE ROLE IF NOT EXISTS proletarian_scheduler;

GRANT SELECT, UPDATE, DELETE ON proletarian.job TO proletarian_worker;
GRANT INSERT ON proletarian.archived_job TO proletarian_worker;
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
GRANT SELECT ON proletarian.job_schema_version TO proletarian_worker;
GRANT INSERT ON proletarian.job TO proletarian_enqueuer;
GRANT SELECT (job_id, queue, unique_key) ON proletarian.job TO proletarian_enqueuer;
GRANT SELECT (job_id, status) ON proletarian.archived_job TO proletarian_enqueuer;
GRANT SELECT, INSERT, UPDATE ON proletarian.job_dependencies TO proletarian_enqueuer;
GRANT INSERT ON proletarian.job_blocked TO proletarian_enqueuer;
GRANT INSERT ON proletarian.job_workflows TO proletarian_enqueuer;
GRANT SELECT, INSERT, UPDATE ON proletarian.job_periodic TO proletarian_scheduler;
GRANT INSERT ON proletarian.job TO proletarian_scheduler;
GRANT SELECT ON proletarian.job_schema_version TO proletarian_scheduler;
