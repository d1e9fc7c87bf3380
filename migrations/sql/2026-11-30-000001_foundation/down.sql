DROP TABLE servers;
DROP TABLE api_keys;
DROP TABLE accounts;
