-- Each box's disk key (issue 30, encryption at rest): the LUKS passphrase of
-- its qcow2 overlay, sealed by the master key (AES-256-GCM: 12-byte nonce,
-- then the ciphertext, bound to the box id). The row is deleted when the box
-- stops or fails (`transition_box`), which makes its disk unreadable even
-- while its file is still on the host; a pooled box's row goes with it.
CREATE TABLE box_disk_keys (
    box_id      TEXT PRIMARY KEY REFERENCES boxes (id) ON DELETE CASCADE,
    key_sealed  BYTEA NOT NULL CHECK (length(key_sealed) > 12),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
