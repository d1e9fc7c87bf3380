-- The AWS account an account of psbx reads its ECS services from
-- (environments.txt, "Import service settings from AWS"): the read-only
-- role psbx assumes (with the account's ExternalId, derived from the master
-- key and never stored) and the region of its services. Set once the role
-- was assumed successfully.
CREATE TABLE account_aws (
    account_id    TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    role_arn      TEXT NOT NULL,
    region        TEXT NOT NULL,
    connected_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
