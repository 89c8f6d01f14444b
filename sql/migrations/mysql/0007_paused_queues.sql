-- proletarian-di schema, step 7 (paused queues) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_paused (
    queue       VARCHAR(255) PRIMARY KEY, -- a paused queue: its workers claim none of its jobs
    paused_at   DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
