-- proletarian-di schema, step 2 (proletarian di types) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

SET time_zone = '+00:00'; -- TIMESTAMP values become UTC DATETIME values

ALTER TABLE proletarian.job
    DROP INDEX queue, -- Proletarian's unnamed INDEX (queue(256), process_at)
    CONVERT TO CHARACTER SET utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */,
    MODIFY queue       VARCHAR(255) NOT NULL,
    MODIFY job_type    VARCHAR(255) NOT NULL,
    MODIFY payload     LONGTEXT NOT NULL,
    MODIFY enqueued_at DATETIME(6) NOT NULL,
    MODIFY process_at  DATETIME(6) NOT NULL,
    ADD INDEX job_queue_process_at (queue, process_at);

ALTER TABLE proletarian.archived_job
    CONVERT TO CHARACTER SET utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */,
    MODIFY queue       VARCHAR(255) NOT NULL,
    MODIFY job_type    VARCHAR(255) NOT NULL,
    MODIFY payload     LONGTEXT NOT NULL,
    MODIFY enqueued_at DATETIME(6) NOT NULL,
    MODIFY process_at  DATETIME(6) NOT NULL,
    MODIFY status      VARCHAR(16) NOT NULL,
    MODIFY finished_at DATETIME(6) NOT NULL;
