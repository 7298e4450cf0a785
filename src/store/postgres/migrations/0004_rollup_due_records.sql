-- Rollup due records: a batch that changes counts lists the posts it
-- incremented in its marker row, in the same transaction, with the time
-- its wait began (rollup_due). The refresher that committed it clears both
-- once every one of those posts' rollups shows the batch; a record left
-- waiting longer than a refresh should take (its replica was killed) is
-- taken over by any live replica. Older builds leave both NULL, which
-- means "nothing due". Nullable columns without a default: adding them
-- rewrites nothing, so this runs while older replicas commit.
ALTER TABLE batch_markers ADD COLUMN rollup_posts text[];
ALTER TABLE batch_markers ADD COLUMN rollup_due timestamptz;
-- Only the waiting records, the takeover's query.
CREATE INDEX batch_markers_rollup_due ON batch_markers (rollup_due)
    WHERE rollup_due IS NOT NULL;
