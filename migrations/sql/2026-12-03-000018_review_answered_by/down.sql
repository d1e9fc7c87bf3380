ALTER TABLE reviews DROP COLUMN answered_by;
