-- Screenshots and recordings of boxes (`sandbox_shot`, `POST /v1/boxes/{id}/shots`)
-- and the reviews that hand a box to a person (`sandbox_review`, the app's
-- "Ready for you"). The files themselves live in the shot storage (under
-- data_dir by default); a row records where (`storage_key`) and how big they
-- are (`bytes` + `poster_bytes` + `preview_bytes`, for metering). A box's shots
-- are deleted when it stops unless a review keeps them (`review_id`).
CREATE TABLE reviews (
    id           TEXT PRIMARY KEY CHECK (id ~ '^rev_[A-Za-z0-9]+$'),
    account_id   TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    box_id       TEXT NOT NULL,
    title        TEXT NOT NULL,
    summary      TEXT NOT NULL,
    urls         TEXT[] NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('waiting', 'answered', 'approved')),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    answered_at  TIMESTAMPTZ
);
CREATE INDEX reviews_account ON reviews (account_id, created_at DESC);
CREATE INDEX reviews_box ON reviews (box_id, created_at DESC);

CREATE TABLE shots (
    id            TEXT PRIMARY KEY CHECK (id ~ '^shot_[A-Za-z0-9]+$'),
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    box_id        TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('screenshot', 'recording', 'annotation')),
    mime          TEXT NOT NULL,
    width         INTEGER NOT NULL,
    height        INTEGER NOT NULL,
    duration_ms   BIGINT,
    bytes         BIGINT NOT NULL,
    preview_bytes BIGINT NOT NULL,
    poster_bytes  BIGINT NOT NULL,
    source        TEXT,
    review_id     TEXT REFERENCES reviews (id) ON DELETE SET NULL,
    storage_key   TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX shots_box ON shots (box_id, created_at);
CREATE INDEX shots_account ON shots (account_id);

-- What a person sent back on a review: text and, optionally, the annotated image.
CREATE TABLE review_items (
    id          TEXT PRIMARY KEY CHECK (id ~ '^fb_[A-Za-z0-9]+$'),
    review_id   TEXT NOT NULL REFERENCES reviews (id) ON DELETE CASCADE,
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    text        TEXT NOT NULL,
    shot_id     TEXT REFERENCES shots (id) ON DELETE SET NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX review_items_review ON review_items (review_id, position);
