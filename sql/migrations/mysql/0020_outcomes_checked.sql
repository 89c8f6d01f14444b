-- proletarian-di schema, step 20 (outcomes checked) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job_hourly_outcomes' AND column_name = 'checked_at'),
       NULL, 'ADD COLUMN checked_at DATETIME(6) NULL'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job_hourly_outcomes ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
