-- The account's box-URL IP allowlist (faq "Who can open a box's URL?"): IPv4
-- addresses and ranges in CIDR form, at most 50, checked by the server before
-- a request to a box URL wakes anything. An empty list admits everyone; the
-- row is kept then, so updated_at says when the list was last changed.
CREATE TABLE box_access (
    account_id  TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    entries     TEXT[] NOT NULL CHECK (cardinality(entries) <= 50),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
