-- Several nodes on one database (issue 33).
--
-- A host is named: two nodes may supervise boxes through one libvirtd (the
-- tests do), so its URI no longer tells hosts apart. A host recorded before
-- names is named by its URI; the node that supervises it renames it on its
-- first start (`Store::take_host`).
ALTER TABLE hosts DROP CONSTRAINT hosts_pkey;
ALTER TABLE hosts ADD COLUMN name TEXT;
UPDATE hosts SET name = uri;
ALTER TABLE hosts ALTER COLUMN name SET NOT NULL;
ALTER TABLE hosts ADD PRIMARY KEY (name);

-- The mark a host writes into its domains' metadata; it also names the
-- host's nftables table and picks its range of QEMU uids, so that hosts
-- sharing a libvirtd never touch each other's boxes. A host from before
-- carries the installation's id, which its domains already hold.
ALTER TABLE hosts ADD COLUMN owner TEXT;
UPDATE hosts SET owner = CASE
    WHEN name = (SELECT min(name) FROM hosts)
        THEN COALESCE((SELECT value FROM meta WHERE key = 'installation_id'), 'inst_' || substr(md5(name), 1, 16))
    ELSE 'inst_' || substr(md5(name), 1, 16)
END;
ALTER TABLE hosts ALTER COLUMN owner SET NOT NULL;
CREATE UNIQUE INDEX hosts_owner ON hosts (owner);

-- The lease of the node supervising the host (`server_id`): renewed by its
-- heartbeat; once `lease_expires_at` has passed, the node stops acting on
-- the host's boxes and other nodes answer for them with 503
-- `host_unavailable`. `lease_epoch` counts the times the lease was taken.
ALTER TABLE hosts ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN lease_expires_at TIMESTAMPTZ;
-- The holder's node key (`<data_dir>/node.key`): a node restarted on the same
-- data directory after a crash takes its host back at once, instead of
-- waiting out the lease of its own previous life.
ALTER TABLE hosts ADD COLUMN holder_key TEXT;
-- Set by `psbx hosts drain`: no placement here, frozen boxes move away.
ALTER TABLE hosts ADD COLUMN draining BOOLEAN NOT NULL DEFAULT false;
-- What the host's capacity ledger admits more of, as its node last
-- published it (each lease renewal), less what placements took since; and
-- its pool's clean boxes by size ({"1": 2}). Placement reads these.
ALTER TABLE hosts ADD COLUMN free_cpus DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN free_memory_mib BIGINT NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN pool JSONB NOT NULL DEFAULT '{}';

ALTER TABLE boxes RENAME COLUMN host_uri TO host;

-- The address other nodes reach this node's peer listener at (host:port).
ALTER TABLE servers ADD COLUMN advertise TEXT;
