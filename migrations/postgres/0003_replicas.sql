-- Several gateway replicas on one database: who is alive, and who holds what.
--
-- A replica row is one incarnation of a gateway process (a new id at every
-- start). It is alive while `expires_at` is ahead of the database's clock:
-- its heartbeat moves it six times per lease time. Leases name what
-- one replica at a time may do (run a session's turns, poll a Telegram
-- token, hold a Discord shard); a lease is valid exactly while its holder
-- is alive, so one heartbeat keeps all of a replica's leases and a replica
-- that dies loses them all at once, without a write. Times are the
-- database's (`now()`), so replicas' clocks need not agree.

CREATE TABLE gateway_replicas (
    id         TEXT COLLATE "C" PRIMARY KEY,
    -- the host name and pid, for operators
    host       TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    -- set by whoever takes work over from it once it expired: it may not
    -- come back. An expired replica that nobody took anything from (all of
    -- them lost the database for a while) heartbeats on as before.
    fenced     BOOLEAN NOT NULL DEFAULT false
);

CREATE TABLE gateway_leases (
    -- 'session:<id>', 'receiver:<channel>:<part>' (a polled Telegram token, a Discord shard)
    name        TEXT COLLATE "C" PRIMARY KEY,
    holder      TEXT COLLATE "C" NOT NULL,
    -- the holder's workspaces volume: a session taken over from another
    -- volume starts a fresh workspace, and the chat is told
    volume      TEXT COLLATE "C" NOT NULL DEFAULT '',
    acquired_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX gateway_leases_by_holder ON gateway_leases (holder);

-- Which replica delivers a pending reply (the one that stored it; after it
-- died, whoever takes its work over).
ALTER TABLE gateway_outbox ADD COLUMN claimed_by TEXT COLLATE "C";
