-- proletarian-di schema, step 16 (rate limits) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_rate_slots (
    bucket      VARCHAR(255) NOT NULL,    -- what is limited: the queue
    slot        INTEGER NOT NULL,         -- 0 to the limit - 1: a start may use it once a period
    used_at     DATETIME(6) NOT NULL,     -- UTC; the start it last counted, by the database's clock
    period_ms   BIGINT NOT NULL,          -- the limit's period, as its workers last set it
    PRIMARY KEY (bucket, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
