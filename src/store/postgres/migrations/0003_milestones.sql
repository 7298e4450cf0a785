-- Milestones: one row per (post, milestone) reached, inserted by the rollup
-- write that first shows the post's total at or above the milestone, in the
-- same statement as that write (ON CONFLICT DO NOTHING: decided once per
-- post and milestone, ever), then delivered by the dispatcher: it claims
-- due rows with FOR UPDATE SKIP LOCKED and leases them (status 'leased',
-- due_at = lease_until), and settles only the row of its own attempt.
-- due_at is NULL once a row is done or dead, so the partial index holds
-- only the rows still to deliver.
CREATE TABLE milestones (
    post_id      text COLLATE "C" NOT NULL,
    milestone    bigint NOT NULL,
    likes        bigint NOT NULL,
    reached_at   timestamptz NOT NULL,
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'leased', 'done', 'dead')),
    attempts     integer NOT NULL DEFAULT 0,
    due_at       timestamptz,
    lease_until  timestamptz,
    last_error   text,
    delivered_at timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, milestone)
);
CREATE INDEX milestones_due ON milestones (due_at) WHERE due_at IS NOT NULL;
