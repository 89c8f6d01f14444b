-- proletarian-di schema, step 16 (workflows) for PostgreSQL 9.5+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE TABLE IF NOT EXISTS proletarian.job_dependencies (
    parent_id     UUID NOT NULL,        -- the job waited on
    job_id        UUID NOT NULL,        -- the job that waits on it (blocked until released)
    wait_for      VARCHAR(16) NOT NULL, -- success: every parent must succeed; complete: end
    parent_status VARCHAR(16),          -- the parent's outcome, once known (NULL: not yet)
    PRIMARY KEY (parent_id, job_id)
);
CREATE INDEX IF NOT EXISTS job_dependencies_job_id_status ON proletarian.job_dependencies (job_id, parent_status);
CREATE TABLE IF NOT EXISTS proletarian.job_blocked (
    job_id      UUID PRIMARY KEY,       -- a job waiting on others (its process_at: the end of time)
    wait_for    VARCHAR(16) NOT NULL,   -- as its dependencies' wait_for
    blocked_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS proletarian.job_workflows (
    job_id      UUID PRIMARY KEY,       -- a job of a workflow
    workflow_id UUID NOT NULL,          -- the workflow's id (`Workflow.enqueue`)
    name        TEXT NOT NULL           -- the workflow's name
);
CREATE INDEX IF NOT EXISTS job_workflows_workflow_id ON proletarian.job_workflows (workflow_id);
