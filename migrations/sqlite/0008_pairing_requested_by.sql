-- Who left a pending code: for a group's code, the sender who addressed the
-- bot there; for a sender's own code, that sender. One sender may leave codes
-- for a few groups only (gateway::pairing::store), so one account that adds
-- the bot to many groups cannot fill the channel's room for codes. Rows from
-- before this column have none and count for nobody.
ALTER TABLE gateway_pairing ADD COLUMN requested_by TEXT;
