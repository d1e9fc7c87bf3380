-- Where a service's settings came from when they were imported rather than
-- uploaded (environments.txt, "Import service settings from AWS"): the ECS
-- service, the task definition and container read, and what could not be
-- read (`skipped`). `sync` reads the same service again. Names only, never
-- values: the values stay sealed in `ciphertext`.
ALTER TABLE environment_services ADD COLUMN source_ref JSONB;
