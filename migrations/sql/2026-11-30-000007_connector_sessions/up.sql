-- The connector sessions each replica holds (DESIGN.md §8): which connection,
-- which replica, the connector's version, when it was last heard from and its
-- round trip. A row lives as long as its session; rows of a replica that
-- died are recognised by its stale heartbeat in `servers`.
CREATE TABLE connector_sessions (
    id                 TEXT PRIMARY KEY,              -- cs_...
    connection_id      TEXT NOT NULL REFERENCES connections (id) ON DELETE CASCADE,
    server_id          TEXT NOT NULL,
    connector_version  TEXT NOT NULL,
    connected_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    rtt_ms             DOUBLE PRECISION,
    draining           BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX connector_sessions_connection ON connector_sessions (connection_id);
