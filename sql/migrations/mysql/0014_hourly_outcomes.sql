-- proletarian-di schema, step 14 (hourly outcomes) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_hourly_outcomes (
    hour        DATETIME(6) NOT NULL,     -- UTC; a clock hour's start, over when written
    queue       VARCHAR(255) NOT NULL,    -- '': the row that says the hour is summed up
    succeeded   BIGINT NOT NULL,          -- archived as success in the hour
    failed      BIGINT NOT NULL,          -- archived as failure in the hour
    archived    BIGINT NOT NULL,          -- every archived row of the hour, whatever its status
    PRIMARY KEY (hour, queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
