-- Files the agent sent to chats (the `chat.send_file` tool), one row per
-- idempotency key: the turn's reply key, the file's digest and how many times
-- the turn sent those bytes before. A turn run again after a crash finds the
-- files it already delivered here and does not send them again.

CREATE TABLE gateway_files (
    key         TEXT PRIMARY KEY,
    channel     TEXT NOT NULL,
    session     TEXT NOT NULL,
    -- name, path, size and media type, as JSON
    file        TEXT NOT NULL,
    -- sending | delivered | failed
    state       TEXT NOT NULL,
    platform_id TEXT,
    error       TEXT,
    created_at  TEXT NOT NULL,
    finished_at TEXT
);
