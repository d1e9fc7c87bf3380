-- OAuth 2.1 sign-in for MCP clients: account passwords, one-time sign-in links,
-- browser sessions, registered clients, authorization codes, grants and tokens.
-- Every secret (link, session, code, token) is stored as its SHA-256 only.

-- An argon2id hash in PHC string form (`$argon2id$v=19$...`); NULL: no password set.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;

-- One-time sign-in links (`psbx login-link`): 15 minutes, one use.
CREATE TABLE login_links (
    token_sha256  BYTEA PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    used_at       TIMESTAMPTZ
);

-- Signed-in browser sessions (the cookie holds the token).
CREATE TABLE web_sessions (
    token_sha256  BYTEA PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL
);

-- Clients registered dynamically (RFC 7591). Clients identified by a metadata
-- document URL are not stored: their document is fetched (and cached in memory).
CREATE TABLE oauth_clients (
    id             TEXT PRIMARY KEY,              -- client_id, client_...
    name           TEXT,
    redirect_uris  TEXT[] NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One authorization of a client by an account: the family its tokens belong to.
-- Revoking the grant revokes every token issued under it.
CREATE TABLE oauth_grants (
    id          TEXT PRIMARY KEY,                 -- grant_...
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    client_id   TEXT NOT NULL,                    -- a registered id or a metadata document URL
    resource    TEXT NOT NULL,                    -- RFC 8707: the resource the tokens are for
    scope       TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at  TIMESTAMPTZ
);
CREATE INDEX oauth_grants_account ON oauth_grants (account_id);

-- Authorization codes: 10 minutes, one use; a second use revokes the grant made from it.
CREATE TABLE oauth_codes (
    code_sha256     BYTEA PRIMARY KEY CHECK (octet_length(code_sha256) = 32),
    account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    client_id       TEXT NOT NULL,
    redirect_uri    TEXT NOT NULL,
    code_challenge  TEXT NOT NULL,                -- PKCE, S256 only
    resource        TEXT NOT NULL,
    scope           TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at      TIMESTAMPTZ NOT NULL,
    used_at         TIMESTAMPTZ,
    grant_id        TEXT REFERENCES oauth_grants (id) ON DELETE CASCADE
);

-- Access tokens (one hour) and refresh tokens (rotated: each is used once).
CREATE TABLE oauth_tokens (
    token_sha256  BYTEA PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    grant_id      TEXT NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    kind          TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    used_at       TIMESTAMPTZ,                    -- a refresh token, once rotated
    revoked_at    TIMESTAMPTZ
);
CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);
