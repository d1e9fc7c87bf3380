DROP TABLE oidc_keys;
