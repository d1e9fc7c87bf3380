-- What each box sent through its environment's connections (box_egress,
-- environments spec "How a box reaches an address" item 6), in bytes. Each
-- replica adds what it counted every few seconds and when it stops; what
-- the user's network sends back is not metered.
CREATE TABLE box_egress (
    box_id      TEXT PRIMARY KEY REFERENCES boxes (id) ON DELETE CASCADE,
    bytes       BIGINT NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
