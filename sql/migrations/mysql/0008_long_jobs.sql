-- proletarian-di schema, step 8 (long jobs) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order, each once; `proletarian-di schema upgrade` does it for
-- you and records the version.

ALTER TABLE proletarian.job ADD COLUMN leased_by VARCHAR(255) NULL;
CREATE TABLE IF NOT EXISTS proletarian.job_claims (
    job_id      BINARY(16) PRIMARY KEY,   -- a job claimed by a worker with max_crashes set
    claims      INTEGER NOT NULL          -- its claims, committed apart from its transaction
) ENGINE=InnoDB;
