-- The data-format version kept with the data: at most one row. No row
-- means format 1 (what every build wrote before this table). Raised only
-- by `hotcount setup --data-format N`, once every replica runs a build
-- that knows format N; `run` and every command that writes refuse to
-- start against a format above the one their build knows. Builds before
-- this migration never read the table.
CREATE TABLE data_format (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version    integer NOT NULL CHECK (version >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);
