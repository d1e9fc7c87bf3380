-- Environments: an account's dev setups. Connections (one per network, each
-- with its connector token, stored as a SHA-256 only, and its address list),
-- and services' settings (values sealed under the master key; their variable
-- names in clear, for reads).
CREATE TABLE environments (
    id                 TEXT PRIMARY KEY,            -- env_...
    account_id         TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name               TEXT NOT NULL,
    external_base_url  TEXT,
    aws_role_arn       TEXT,
    aws_region         TEXT,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (account_id, name)
);

CREATE TABLE connections (
    id                TEXT PRIMARY KEY,             -- conn_...
    environment_id    TEXT NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    token_sha256      BYTEA NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    endpoints         JSONB NOT NULL DEFAULT '[]',  -- [{"host": ..., "port": ...}], in the order given
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    token_rotated_at  TIMESTAMPTZ,
    UNIQUE (environment_id, name)
);

CREATE TABLE environment_services (
    environment_id  TEXT NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    variable_names  JSONB NOT NULL,                 -- ["KEY", ...], in the order given
    nonce           BYTEA NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext      BYTEA NOT NULL,                 -- sealed JSON [[KEY, value], ...]
    source          TEXT NOT NULL,                  -- dotenv
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, name)
);

