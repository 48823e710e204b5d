-- The admin console's chat list (GatewayTables::chats): each session's
-- newest message, message count and unfinished count, newest first, without
-- reading the whole inbox (a million rows, ten thousand sessions). The
-- statement walks the distinct sessions one probe of this index each, finds
-- a session's newest row with one more (every SQLite index ends with the
-- rowid, `seq`, so the index is ordered by session, then seq), and counts
-- only the sessions it returns, each a range of the index.
CREATE INDEX gateway_inbox_sessions ON gateway_inbox (session);

-- The unfinished rows of one session (PostgreSQL has had this one since its 0002).
CREATE INDEX gateway_inbox_session_unfinished ON gateway_inbox (session, seq) WHERE state <> 'done';
