-- psbx's signing keys as an OIDC issuer (environments.txt, "AWS permissions
-- inside a box"): boxes trade an identity token signed with the current key for
-- AWS credentials. The private key (PKCS#8, ECDSA P-256) is sealed with the
-- master key (AES-256-GCM, associated data "oidc-key\0<kid>"); the public half
-- is kept as the JWK the JWKS publishes. A key retired by a rotation stays
-- published until every token it signed has expired.
CREATE TABLE oidc_keys (
    kid         TEXT PRIMARY KEY,
    public_jwk  JSONB NOT NULL,
    nonce       BYTEA NOT NULL,
    sealed_key  BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    retired_at  TIMESTAMPTZ
);
-- At most one key signs at a time.
CREATE UNIQUE INDEX oidc_keys_one_current ON oidc_keys ((retired_at IS NULL)) WHERE retired_at IS NULL;
