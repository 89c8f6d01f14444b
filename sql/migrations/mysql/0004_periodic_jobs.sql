-- proletarian-di schema, step 4 (periodic jobs) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_periodic (
    name        VARCHAR(255) PRIMARY KEY, -- the schedule's name (PeriodicJob.name)
    cron        VARCHAR(255) NOT NULL,    -- its cron expression, as declared
    timezone    VARCHAR(64) NOT NULL,     -- the IANA time zone the expression is read in
    job_type    VARCHAR(255) NOT NULL,
    queue       VARCHAR(255) NOT NULL,
    last_tick   DATETIME(6) NOT NULL,     -- UTC; the newest tick enqueued or passed over
    updated_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
