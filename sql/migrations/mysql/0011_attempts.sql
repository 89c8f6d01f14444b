-- proletarian-di schema, step 11 (attempts) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET @ddl = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'archived_job' AND column_name = 'started_at'),
       NULL, 'ADD COLUMN started_at DATETIME(6) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'archived_job' AND column_name = 'worker'),
       NULL, 'ADD COLUMN worker VARCHAR(255) NULL'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.archived_job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
CREATE TABLE IF NOT EXISTS proletarian.job_attempt (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    job_id      BINARY(16) NOT NULL,      -- a job's failed attempts; its success is in the archive
    attempt     INTEGER NOT NULL,         -- the attempt's number, from 1
    started_at  DATETIME(6) NULL,         -- UTC; NULL: unknown (its lease ran out)
    finished_at DATETIME(6) NOT NULL,     -- UTC; when it ended, or was found to have ended
    worker      VARCHAR(255) NULL,        -- who ran it: host:pid thread
    error       TEXT NULL,                -- its error (type, message, trace)
    INDEX job_attempt_job_id (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
