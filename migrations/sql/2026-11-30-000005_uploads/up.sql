-- One-time upload URLs handed out by the MCP tool sandbox_sync: the token in
-- the URL is the only credential, so only its SHA-256 is kept. Each is bound to
-- an account, a box and a destination under /work, is used at most once, and
-- expires (15 minutes after it is made).
CREATE TABLE uploads (
    token_sha256  BYTEA PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    box_id        TEXT NOT NULL REFERENCES boxes (id) ON DELETE CASCADE,
    dest          TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    used_at       TIMESTAMPTZ
);
CREATE INDEX uploads_expires_at ON uploads (expires_at);
