-- proletarian-di schema, step 12 (live workers) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_workers (
    worker_id   VARCHAR(255) PRIMARY KEY, -- one running QueueWorker (host:pid:random)
    queue       VARCHAR(255) NOT NULL,
    queue_worker_id VARCHAR(255) NOT NULL,
    host        VARCHAR(255) NOT NULL,
    pid         INTEGER NOT NULL,
    threads     INTEGER NOT NULL,         -- its worker_threads
    state       VARCHAR(16) NOT NULL,     -- running / stopping
    started_at  DATETIME(6) NOT NULL,     -- UTC, by the database's clock
    seen_at     DATETIME(6) NOT NULL,     -- UTC; its last heartbeat, by the database's clock
    activity    MEDIUMTEXT NOT NULL       -- JSON: what each thread does (its job), for how long
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
