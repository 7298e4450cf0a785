-- The fleet's milestone setting: at most one row, stored by `hotcount setup
-- --milestones LIST` / `--no-milestones` (or adopted from the first `run`
-- that names milestones when none is stored), and read by every writer of
-- rollups, so whether milestones are recorded, and which, is the same for
-- every replica and operator tool whatever their flags.
CREATE TABLE milestone_settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    enabled    boolean NOT NULL,
    milestones bigint[] NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
