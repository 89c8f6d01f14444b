-- proletarian-di schema, step 8 (long jobs) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND column_name = 'leased_by'),
       NULL, 'ADD COLUMN leased_by VARCHAR(255) NULL'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      BINARY(16) PRIMARY KEY,   -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL          -- its claims, committed apart from its transaction
) ENGINE=InnoDB;
