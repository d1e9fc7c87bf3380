DROP TABLE oauth_tokens;
DROP TABLE oauth_codes;
DROP TABLE oauth_grants;
DROP TABLE oauth_clients;
DROP TABLE web_sessions;
DROP TABLE login_links;
ALTER TABLE accounts DROP COLUMN password_hash;
