-- The admin console's chat list (GatewayTables::chats): each session's
-- newest message, message count and unfinished count, newest first, without
-- reading the whole inbox (a million rows, ten thousand sessions). The
-- statement walks the distinct sessions one probe of this index each, finds
-- a session's newest row with one more, and counts only the sessions it
-- returns, each a range of the index (an index-only scan once the table is
-- vacuumed). gateway_inbox_session_unfinished (0002) counts the unfinished.
CREATE INDEX gateway_inbox_sessions ON gateway_inbox (session, seq);
