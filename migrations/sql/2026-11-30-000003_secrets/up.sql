-- The account's secrets: values encrypted with AES-256-GCM under the server's
-- master key (nonce per value; the account and name are the associated data).
CREATE TABLE secrets (
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    nonce       BYTEA NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext  BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, name)
);
