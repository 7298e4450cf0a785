-- Rollups: one row per post with the sum of its counter shards taken at one
-- snapshot (as_of), what clients read, and LISTEN for on the channel
-- hotcount_counts (the refresher sends NOTIFY hotcount_counts, '<post>'
-- with each write). Written only by the rollup refresher, never by a
-- batch's transaction, and only over a row with an older as_of, so as_of
-- never goes backwards. Updates never touch the key: free space in each
-- page keeps them heap-only.
CREATE TABLE post_counts (
    post_id    text COLLATE "C" NOT NULL PRIMARY KEY,
    likes      bigint NOT NULL,
    as_of      timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);
