-- Keeps tapes.last_entry_id in step with inserted entries, so an append to a
-- known tape is one INSERT statement (atomic on its own, one round trip, one
-- commit) instead of a transaction of several statements.
CREATE TRIGGER tape_entries_advance AFTER INSERT ON tape_entries
BEGIN
    UPDATE tapes
       SET last_entry_id = NEW.entry_id, updated_at = NEW.date
     WHERE id = NEW.tape_id AND last_entry_id < NEW.entry_id;
END;
