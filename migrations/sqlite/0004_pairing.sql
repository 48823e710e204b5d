-- Pairing: who a chat-platform channel answers beyond what the config names.
-- An unknown sender's direct message (or an addressed message in a group
-- nobody approved) leaves a pending row with a one-time code; an admin
-- (`bub pairing approve`) or an operator (`,pairing approve`) turns it into
-- an approved one. Approved rows are what admission looks up.

CREATE TABLE gateway_pairing (
    channel      TEXT NOT NULL,
    -- user: a sender, for direct messages; chat: a group chat and its threads
    subject      TEXT NOT NULL,
    -- the platform's user or chat id
    id           TEXT NOT NULL,
    display      TEXT,
    -- pending | approved
    state        TEXT NOT NULL,
    -- the one-time code of a pending row (no dash, upper case)
    code         TEXT,
    requested_at TEXT NOT NULL,
    -- when the code was last sent to the sender
    notified_at  TEXT,
    approved_at  TEXT,
    approved_by  TEXT,
    PRIMARY KEY (channel, subject, id)
) WITHOUT ROWID;

CREATE UNIQUE INDEX gateway_pairing_code ON gateway_pairing (channel, code) WHERE code IS NOT NULL;
