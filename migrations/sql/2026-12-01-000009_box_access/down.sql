DROP TABLE box_access;
