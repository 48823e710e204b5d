-- Tapes and their entries. Kept to SQL that PostgreSQL also accepts (apart from
-- WITHOUT ROWID, which only changes SQLite's storage layout), so the PostgreSQL
-- migration stays a near copy.

CREATE TABLE tapes (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    -- ids are gapless from 1, so this is also the number of entries
    last_entry_id BIGINT  NOT NULL DEFAULT 0,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL
);

CREATE TABLE tape_entries (
    tape_id  BIGINT NOT NULL REFERENCES tapes (id),
    entry_id BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    -- anchor or event name, NULL for other kinds
    name     TEXT,
    payload  TEXT   NOT NULL,
    meta     TEXT   NOT NULL,
    -- RFC 3339 UTC with microseconds, fixed width: text order is time order
    date     TEXT   NOT NULL,
    PRIMARY KEY (tape_id, entry_id)
) WITHOUT ROWID;

-- "last anchor" and "last entry of a kind" are one index probe
CREATE INDEX tape_entries_by_kind ON tape_entries (tape_id, kind, entry_id);
-- "last anchor / event named X" likewise
CREATE INDEX tape_entries_by_name ON tape_entries (tape_id, name, entry_id) WHERE name IS NOT NULL;
