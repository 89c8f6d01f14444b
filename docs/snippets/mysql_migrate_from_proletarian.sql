-- Bring MySQL tables created with Proletarian's (Clojure) schema to proletarian-di's.
-- Stop every worker first. Run it once; it rebuilds both tables.
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
