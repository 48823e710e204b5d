-- Tapes and their entries: the tables of migrations/sqlite/0001, 0002 and 0007
-- in one file (no trigger: an append moves tapes.last_entry_id itself, in the
-- statement that inserts the entries).
--
-- Text that is compared or sorted is COLLATE "C": dates are fixed-width
-- RFC 3339 text whose byte order is time order, and names list in byte order
-- as on SQLite, whatever locale the database was created with. Payloads stay
-- the JSON text bub wrote (not jsonb), so entries read back byte for byte.

CREATE TABLE tapes (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT   COLLATE "C" NOT NULL UNIQUE,
    -- ids are gapless from 1, so this is also the number of entries
    last_entry_id BIGINT NOT NULL DEFAULT 0,
    -- how often the tape was reset (the context cache tells a reset tape apart by it)
    resets        BIGINT NOT NULL DEFAULT 0,
    created_at    TEXT   COLLATE "C" NOT NULL,
    updated_at    TEXT   COLLATE "C" NOT NULL
);

CREATE TABLE tape_entries (
    tape_id  BIGINT NOT NULL REFERENCES tapes (id),
    entry_id BIGINT NOT NULL,
    kind     TEXT   COLLATE "C" NOT NULL,
    -- anchor or event name, NULL for other kinds
    name     TEXT   COLLATE "C",
    payload  TEXT   NOT NULL,
    meta     TEXT   NOT NULL,
    -- RFC 3339 UTC with microseconds, fixed width: text order is time order
    date     TEXT   COLLATE "C" NOT NULL,
    PRIMARY KEY (tape_id, entry_id)
);

-- "last anchor" and "last entry of a kind" are one index probe
CREATE INDEX tape_entries_by_kind ON tape_entries (tape_id, kind, entry_id);
-- "last anchor / event named X" likewise
CREATE INDEX tape_entries_by_name ON tape_entries (tape_id, name, entry_id) WHERE name IS NOT NULL;
