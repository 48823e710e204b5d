-- How often each tape was reset. A reader that keeps a tape's latest entries
-- in memory (the context cache) asks only for the entries after the last id
-- it saw; ids start again at 1 after a reset, so "the same tape grown past
-- that id again" is told apart by this count, read in the same probe.
ALTER TABLE tapes ADD COLUMN resets BIGINT NOT NULL DEFAULT 0;
