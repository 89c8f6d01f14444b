-- proletarian-di schema, step 21 (schedule controls) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job_periodic' AND column_name = 'paused_at'),
       NULL, 'ADD COLUMN paused_at DATETIME(6) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job_periodic' AND column_name = 'run_requested_at'),
       NULL, 'ADD COLUMN run_requested_at DATETIME(6) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job_periodic' AND column_name = 'recent_runs'),
       NULL, 'ADD COLUMN recent_runs TEXT NULL'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job_periodic ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
