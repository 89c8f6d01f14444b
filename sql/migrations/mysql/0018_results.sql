-- proletarian-di schema, step 18 (results) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_results (
    job_id       BINARY(16) PRIMARY KEY,   -- an archived job's id
    status       VARCHAR(16) NOT NULL,     -- success (the Django backend writes its own)
    return_value MEDIUMTEXT NULL,          -- the handler's return value, JSON
    errors       MEDIUMTEXT NULL,          -- the Django backend's errors, JSON
    attempts     INTEGER NOT NULL,
    worker_id    VARCHAR(255) NULL,        -- who ran it: host:pid thread
    started_at   DATETIME(6) NULL,         -- UTC
    finished_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
