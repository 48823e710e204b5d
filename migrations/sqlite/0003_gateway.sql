-- The gateway's durable inbox and outbox. An inbound message is stored here
-- (once per channel and platform message id) before its channel acknowledges
-- it; a reply is stored in the outbox before it is sent, and marked delivered
-- with the platform's message ids.

CREATE TABLE gateway_inbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    channel     TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    -- the Inbound as JSON
    inbound     TEXT NOT NULL,
    -- queued: stored, not yet in a turn; running: part of turn `turn`; done: `outcome` is final
    state       TEXT NOT NULL,
    session     TEXT,
    turn        TEXT,
    outcome     TEXT,
    received_at TEXT NOT NULL,
    finished_at TEXT,
    UNIQUE (channel, message_id)
);

CREATE INDEX gateway_inbox_unfinished ON gateway_inbox (seq) WHERE state <> 'done';

CREATE TABLE gateway_outbox (
    -- the idempotency key: one row per reply, whatever happens
    key          TEXT PRIMARY KEY,
    channel      TEXT NOT NULL,
    -- the Outbound as JSON
    outbound     TEXT NOT NULL,
    -- pending | delivered | failed
    state        TEXT NOT NULL,
    platform_ids TEXT,
    error        TEXT,
    created_at   TEXT NOT NULL,
    finished_at  TEXT
);

CREATE INDEX gateway_outbox_pending ON gateway_outbox (created_at) WHERE state = 'pending';
