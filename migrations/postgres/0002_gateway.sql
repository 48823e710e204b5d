-- The gateway's tables: the inbox and outbox, the files sent by tools, the
-- live messages and the pairing table. migrations/sqlite/0003, 0004, 0005,
-- 0006 and 0008 in one file; what each table is for is said there.
--
-- As in 0001: text that is compared or sorted is COLLATE "C" (times are
-- fixed-width RFC 3339 text, so byte order is time order, whatever locale
-- the database was created with); JSON stays the TEXT bub wrote, read back
-- byte for byte.

CREATE TABLE gateway_inbox (
    -- arrival order
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel     TEXT   COLLATE "C" NOT NULL,
    message_id  TEXT   COLLATE "C" NOT NULL,
    -- the Inbound as JSON
    inbound     TEXT   NOT NULL,
    -- queued: stored, not yet in a turn; running: part of turn `turn`; done: `outcome` is final
    state       TEXT   COLLATE "C" NOT NULL,
    session     TEXT   COLLATE "C",
    turn        TEXT   COLLATE "C",
    -- the Outcome as JSON
    outcome     TEXT,
    received_at TEXT   COLLATE "C" NOT NULL,
    finished_at TEXT   COLLATE "C",
    -- the replica incarnation running the row (none yet: kept for the
    -- replicas' claims, which come next)
    claimed_by  TEXT   COLLATE "C",
    UNIQUE (channel, message_id)
);

-- What a restart resumes, oldest first.
CREATE INDEX gateway_inbox_unfinished ON gateway_inbox (seq) WHERE state <> 'done';
-- The unfinished rows of one session (the replica that takes a session over
-- resumes them).
CREATE INDEX gateway_inbox_session_unfinished ON gateway_inbox (session, seq) WHERE state <> 'done';

-- The newest message of each chat (latest_per_chat) reads the chat, the
-- thread and whether a row is an edit from the JSON when it runs
-- (`inbound::jsonb #>> '{chat,id}'`), as SQLite's json_extract does, rather
-- than from columns kept for them: it runs when a channel connects, while
-- columns would be filled for every message stored, and the database layer
-- would have to know what an inbound message holds.

CREATE TABLE gateway_outbox (
    -- the idempotency key: one row per reply, whatever happens
    key          TEXT   COLLATE "C" PRIMARY KEY,
    -- insertion order: the replies one turn queues share their created_at
    seq          BIGINT GENERATED ALWAYS AS IDENTITY,
    channel      TEXT   COLLATE "C" NOT NULL,
    -- the Outbound as JSON
    outbound     TEXT   NOT NULL,
    -- pending | delivered | failed
    state        TEXT   COLLATE "C" NOT NULL,
    -- the platform ids of the parts delivered, as a JSON array
    platform_ids TEXT,
    error        TEXT,
    created_at   TEXT   COLLATE "C" NOT NULL,
    finished_at  TEXT   COLLATE "C"
);

CREATE INDEX gateway_outbox_pending ON gateway_outbox (created_at, seq) WHERE state = 'pending';

CREATE TABLE gateway_files (
    -- the turn's reply key, the file's digest and how many times the turn sent those bytes before
    key         TEXT COLLATE "C" PRIMARY KEY,
    channel     TEXT COLLATE "C" NOT NULL,
    session     TEXT COLLATE "C" NOT NULL,
    -- name, path, size and media type, as JSON
    file        TEXT NOT NULL,
    -- sending | delivered | failed
    state       TEXT COLLATE "C" NOT NULL,
    platform_id TEXT COLLATE "C",
    error       TEXT,
    created_at  TEXT COLLATE "C" NOT NULL,
    finished_at TEXT COLLATE "C"
);

CREATE TABLE gateway_live (
    -- the reply's idempotency key (gateway_outbox.key once the turn ends)
    key        TEXT COLLATE "C" PRIMARY KEY,
    channel    TEXT COLLATE "C" NOT NULL,
    -- the ChatRef as JSON
    chat       TEXT NOT NULL,
    -- the platform's message id
    message_id TEXT COLLATE "C" NOT NULL,
    -- what the message showed when it was sent (later edits are not recorded)
    text       TEXT NOT NULL,
    sent_at    TEXT COLLATE "C" NOT NULL
);

CREATE INDEX gateway_live_sent_at ON gateway_live (sent_at);

CREATE TABLE gateway_pairing (
    channel      TEXT COLLATE "C" NOT NULL,
    -- user: a sender, for direct messages; chat: a group chat and its threads
    subject      TEXT COLLATE "C" NOT NULL,
    -- the platform's user or chat id
    id           TEXT COLLATE "C" NOT NULL,
    display      TEXT,
    -- pending | approved
    state        TEXT COLLATE "C" NOT NULL,
    -- the one-time code of a pending row (no dash, upper case)
    code         TEXT COLLATE "C",
    requested_at TEXT COLLATE "C" NOT NULL,
    -- when the code was last sent to the sender
    notified_at  TEXT COLLATE "C",
    approved_at  TEXT COLLATE "C",
    approved_by  TEXT COLLATE "C",
    -- who left a pending code: the sender who addressed the bot in the
    -- group, or the sender itself (one sender may leave codes for a few groups only)
    requested_by TEXT COLLATE "C",
    PRIMARY KEY (channel, subject, id)
);

CREATE UNIQUE INDEX gateway_pairing_code ON gateway_pairing (channel, code) WHERE code IS NOT NULL;
