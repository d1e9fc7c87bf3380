-- Boxes (pooled, live and past) and the libvirt hosts replicas supervise.

-- Facts about this installation, e.g. its id, which marks the libvirt domains
-- it owns so that reconciliation never touches another installation's.
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

CREATE TABLE hosts (
    uri          TEXT PRIMARY KEY,                -- libvirt URI
    server_id    TEXT REFERENCES servers (id) ON DELETE SET NULL,  -- the replica supervising it
    accel        TEXT NOT NULL CHECK (accel IN ('kvm', 'tcg')),
    cpus         INTEGER NOT NULL,
    memory_mib   BIGINT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE boxes (
    id                TEXT PRIMARY KEY,           -- box_...; the domain is psbx-<id>
    account_id        TEXT REFERENCES accounts (id) ON DELETE CASCADE,  -- NULL while pooled
    host_uri          TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN
                        ('pooled', 'creating', 'booting', 'running', 'frozen', 'stopped', 'failed')),
    failure           TEXT,
    name              TEXT,
    goal              TEXT,
    image             TEXT NOT NULL,
    size              INTEGER NOT NULL CHECK (size IN (1, 2, 4, 8)),
    vcpus             INTEGER NOT NULL,
    memory_mib        BIGINT NOT NULL,
    disk_gb           BIGINT NOT NULL,
    keep_secs         BIGINT NOT NULL,            -- expiry: this long after the last activity
    spec              JSONB NOT NULL DEFAULT '{}',  -- services, secret names, environment (later issues)
    boot_id           TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    ready_at          TIMESTAMPTZ,
    last_activity_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    frozen_at         TIMESTAMPTZ,
    stopped_at        TIMESTAMPTZ,
    CONSTRAINT boxes_owned_unless_pooled CHECK ((state = 'pooled') = (account_id IS NULL))
);
CREATE INDEX boxes_account ON boxes (account_id, created_at, id);
CREATE INDEX boxes_host_live ON boxes (host_uri) WHERE state NOT IN ('stopped', 'failed');
