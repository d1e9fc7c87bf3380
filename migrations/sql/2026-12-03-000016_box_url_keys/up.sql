-- Box URL keys, random per box and rotatable (`POST /v1/boxes/{id}/url-key`).
-- `key_hash` is the key's SHA-256, what a request's key is checked against;
-- `key_sealed` is the key sealed by the master key (AES-256-GCM: 12-byte nonce,
-- then the ciphertext), read only to show the box's URLs to its owner. A box
-- without a row (one started before this migration) keeps the key derived
-- from its id (HMAC under the master key) until its key is rotated.
CREATE TABLE box_url_keys (
    box_id      TEXT PRIMARY KEY REFERENCES boxes (id) ON DELETE CASCADE,
    key_hash    BYTEA NOT NULL CHECK (length(key_hash) = 32),
    key_sealed  BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
