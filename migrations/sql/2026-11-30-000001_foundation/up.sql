-- Accounts, API keys and server replicas: the foundation every later table hangs off.

CREATE TABLE accounts (
    id          TEXT PRIMARY KEY,                 -- acct_...
    name        TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,               -- key_...
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    key_sha256    BYTEA NOT NULL UNIQUE,          -- SHA-256 of the whole key; the key itself is never stored
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at  TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ,
    CONSTRAINT api_keys_hash_len CHECK (octet_length(key_sha256) = 32)
);
CREATE INDEX api_keys_account ON api_keys (account_id, created_at, id);

CREATE TABLE servers (
    id            TEXT PRIMARY KEY,               -- srv_... (one per running replica)
    hostname      TEXT NOT NULL,
    version       TEXT NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    stopped_at    TIMESTAMPTZ
);
