-- proletarian-di schema, step 1 (proletarian) for MySQL 8.0.1+ and MariaDB 10.6+.
-- Run the steps in order; `proletarian-di schema upgrade` does it for you and
-- records the version. A step makes only the changes it finds missing, so one
-- interrupted half-way is finished by running it again.

CREATE DATABASE IF NOT EXISTS proletarian;

CREATE TABLE IF NOT EXISTS proletarian.job (
    job_id      BINARY(16) PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMP NOT NULL,
    process_at  TIMESTAMP NOT NULL,
    INDEX (queue(256), process_at)
);

CREATE TABLE IF NOT EXISTS proletarian.archived_job (
    job_id      BINARY(16) PRIMARY KEY,
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at TIMESTAMP NOT NULL,
    process_at  TIMESTAMP NOT NULL,
    status      TEXT NOT NULL,
    finished_at TIMESTAMP NOT NULL
);
