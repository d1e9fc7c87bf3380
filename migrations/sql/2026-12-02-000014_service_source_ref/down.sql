ALTER TABLE environment_services DROP COLUMN source_ref;
