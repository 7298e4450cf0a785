-- The tombstones' generation: one row, bumped in the same statement as
-- each tombstone `hotcount users erase` writes. Every batch checked against
-- the tombstones reads it FOR SHARE in its own transaction (in the round
-- trip that reads the marker), so a bump waits for the batches that read
-- the old value to end, and a batch that reads the new one, having been
-- checked against an older one, applies nothing and is checked again.
CREATE TABLE tombstone_generation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    generation bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO tombstone_generation DEFAULT VALUES;
