-- Takeover links: one-time, expiring links to a web terminal in a box
-- (`POST /v1/boxes/{id}/takeover`). Only the token's SHA-256 (hex) is
-- stored; the WebSocket spends a link (used_at), a GET of its page does
-- not. Rows used or expired for a day are deleted by the heartbeat.
CREATE TABLE takeover_links (
    token_hash  TEXT PRIMARY KEY CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    box_id      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    used_at     TIMESTAMPTZ
);
CREATE INDEX takeover_links_expires_at ON takeover_links (expires_at);
