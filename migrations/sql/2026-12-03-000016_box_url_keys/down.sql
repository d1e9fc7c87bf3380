DROP TABLE box_url_keys;
