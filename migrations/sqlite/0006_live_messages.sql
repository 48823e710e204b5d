-- Live messages: the platform message a streamed reply grows in, kept as soon
-- as the platform returned its id, so that after a crash the reply with the
-- same idempotency key finishes that message (edits it) instead of sending a
-- second one. A row goes when its reply is delivered or given up
-- (gateway_outbox.state leaves 'pending'); rows nobody finished are pruned
-- at start after a week.

CREATE TABLE gateway_live (
    -- the reply's idempotency key (gateway_outbox.key once the turn ends)
    key        TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    -- the ChatRef as JSON
    chat       TEXT NOT NULL,
    -- the platform's message id
    message_id TEXT NOT NULL,
    -- what the message showed when it was sent (later edits are not recorded)
    text       TEXT NOT NULL,
    sent_at    TEXT NOT NULL
);

CREATE INDEX gateway_live_sent_at ON gateway_live (sent_at);
