-- proletarian-di schema, step 19 (workflows) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_dependencies (
    parent_id     BINARY(16) NOT NULL,      -- the job waited on
    job_id        BINARY(16) NOT NULL,      -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL,     -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16) NULL,         -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id),
    INDEX job_dependencies_job_id_status (job_id, parent_status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
CREATE TABLE IF NOT EXISTS proletarian.job_blocked (
    job_id      BINARY(16) PRIMARY KEY,   -- a job waiting on others (process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,     -- as its dependencies' wait_for
    blocked_at  DATETIME(6) NOT NULL      -- UTC
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
CREATE TABLE IF NOT EXISTS proletarian.job_workflows (
    job_id      BINARY(16) PRIMARY KEY,   -- a job of a workflow
    workflow_id BINARY(16) NOT NULL,      -- the workflow's id (`Workflow.enqueue`)
    name        VARCHAR(255) NOT NULL,    -- the workflow's name
    INDEX job_workflows_workflow_id (workflow_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 /*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */;
