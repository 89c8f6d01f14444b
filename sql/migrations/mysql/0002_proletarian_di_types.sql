-- proletarian-di schema, step 2 (proletarian di types) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

SET time_zone = '+00:00'; -- TIMESTAMP values become UTC DATETIME values

SET @ddl = CONCAT_WS(', ',
    IF(NOT EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'queue'),
       NULL, 'DROP INDEX queue'),
    IF(NOT EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND column_name = 'process_at' AND data_type = 'timestamp'),
       NULL, 'CONVERT TO CHARACTER SET utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */, MODIFY queue VARCHAR(255) NOT NULL, MODIFY job_type VARCHAR(255) NOT NULL, MODIFY payload LONGTEXT NOT NULL, MODIFY enqueued_at DATETIME(6) NOT NULL, MODIFY process_at DATETIME(6) NOT NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.statistics
        WHERE table_schema = 'proletarian' AND table_name = 'job' AND index_name = 'job_queue_process_at'),
       NULL, 'ADD INDEX job_queue_process_at (queue, process_at)'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
SET @ddl = CONCAT_WS(', ',
    IF(NOT EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = 'proletarian' AND table_name = 'archived_job' AND column_name = 'process_at' AND data_type = 'timestamp'),
       NULL, 'CONVERT TO CHARACTER SET utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */, MODIFY queue VARCHAR(255) NOT NULL, MODIFY job_type VARCHAR(255) NOT NULL, MODIFY payload LONGTEXT NOT NULL, MODIFY enqueued_at DATETIME(6) NOT NULL, MODIFY process_at DATETIME(6) NOT NULL, MODIFY status VARCHAR(16) NOT NULL, MODIFY finished_at DATETIME(6) NOT NULL'));
SET @ddl = IF(@ddl = '', 'DO 0', CONCAT('ALTER TABLE proletarian.archived_job ', @ddl));
PREPARE ddl FROM @ddl;
EXECUTE ddl;
DEALLOCATE PREPARE ddl;
