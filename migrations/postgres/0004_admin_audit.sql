-- The admin console's audit log: migrations/sqlite/0009_admin_audit.sql,
-- where each column is said. As in 0001: text that is compared or sorted is
-- COLLATE "C".

CREATE TABLE admin_audit (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             TEXT COLLATE "C" NOT NULL,
    admin          TEXT NOT NULL,
    action         TEXT COLLATE "C" NOT NULL,
    target         TEXT,
    diff           TEXT,
    version_before TEXT,
    version_after  TEXT,
    outcome        TEXT COLLATE "C" NOT NULL,
    detail         TEXT
);
