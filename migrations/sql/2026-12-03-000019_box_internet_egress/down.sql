ALTER TABLE box_egress DROP COLUMN internet_counted, DROP COLUMN internet_bytes;
