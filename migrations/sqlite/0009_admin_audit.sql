-- The admin console's audit log: every change an admin applied from it, who
-- and when, whatever became of it. Rows are only added (never changed or
-- removed by bub); the console lists them newest first, a page at a time
-- (`seq < ?` below the last one shown).

CREATE TABLE admin_audit (
    -- insertion order; never reused (AUTOINCREMENT), so a page boundary stays put
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    -- when, RFC 3339
    at             TEXT NOT NULL,
    -- the admin's name (the name of the token they logged in with)
    admin          TEXT NOT NULL,
    -- config.apply | pairing.approve | pairing.refuse
    action         TEXT NOT NULL,
    -- what the action was on, where the action alone does not say (a pairing's channel and code)
    target         TEXT,
    -- config.apply: the unified diff from the running config to the applied text
    diff           TEXT,
    -- config.apply: the config file's versions before and after
    version_before TEXT,
    version_after  TEXT,
    -- applied | needs_restart | rejected
    outcome        TEXT NOT NULL,
    -- needs_restart: the sections; rejected: the error
    detail         TEXT
);
