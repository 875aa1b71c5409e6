-- sluice rules store, schema version 2: the database's identity, so that an
-- instance never takes the rules of another database (an empty one made
-- in its place, say) for a newer version of its own, and the lineage that
-- `sluice rules restore` records, so that the fleet follows a database the
-- rules were restored into. gen_random_uuid() needs PostgreSQL 13 or later.

-- One row: the identity made when sluice created its tables, replaced by a
-- new one at every restore.
CREATE TABLE sluice_database (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id          uuid NOT NULL DEFAULT gen_random_uuid(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    restored_at timestamptz
);
INSERT INTO sluice_database DEFAULT VALUES;

-- The databases this one continues: an instance that served database id
-- at a revision up to revision takes this database's rules. Written by
-- `sluice rules restore` (the snapshot's database and the database's own
-- former identity).
CREATE TABLE sluice_lineage (
    id          uuid PRIMARY KEY,
    revision    bigint NOT NULL CHECK (revision >= 0),
    restored_at timestamptz NOT NULL DEFAULT now()
);
