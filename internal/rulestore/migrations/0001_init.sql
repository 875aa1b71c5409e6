-- sluice rules store, schema version 1: the rules in force, the client
-- registry, and the history of every change (who, when, old and new value).
-- Applied by sluice at start (rulestore.OpenPostgres) inside one
-- transaction, under a transaction-scoped advisory lock, and recorded in
-- sluice_schema_migrations.

-- The rule set's head: one row, its revision (bumped by every change) and
-- the default plan. Writers lock it (SELECT ... FOR UPDATE) to serialize.
CREATE TABLE sluice_state (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    revision     bigint NOT NULL CHECK (revision >= 0),
    default_plan text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO sluice_state (revision, default_plan) VALUES (0, '');

-- The rules in force, in order (position), each as its JSON document
-- (the admin API's form, e.g. {"id": "free", "limit": 100, "window": "1m"}).
CREATE TABLE sluice_rules (
    id       text PRIMARY KEY,
    position integer NOT NULL,
    body     jsonb NOT NULL
);

-- The client registry: client id ("user:alice", "api_key:k1", "ip:...")
-- to plan.
CREATE TABLE sluice_clients (
    id   text PRIMARY KEY,
    plan text NOT NULL
);

-- One row per revision: when it was made, by whom, and the parts of the
-- set that are not per id (the default plan, the order of the rules).
CREATE TABLE sluice_revisions (
    revision     bigint PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    default_plan text NOT NULL,
    rule_order   text[] NOT NULL
);

-- One row per changed rule, client or default plan in a revision, with
-- the old and the new value as written (json, not jsonb: kept verbatim).
CREATE TABLE sluice_history (
    revision bigint NOT NULL REFERENCES sluice_revisions (revision),
    seq      integer NOT NULL,
    kind     text NOT NULL CHECK (kind IN ('rule', 'client', 'default_plan')),
    id       text NOT NULL,
    op       text NOT NULL CHECK (op IN ('create', 'update', 'delete')),
    before   json,
    after    json,
    PRIMARY KEY (revision, seq)
);
CREATE INDEX sluice_history_by_id ON sluice_history (kind, id, revision DESC);
