DROP TABLE box_disk_keys;
