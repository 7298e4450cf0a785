-- hotcount's tables: memberships (the source of truth), counter shards
-- (their sum is a post's count), batch markers (an attempt that committed)
-- and quarantine records. Ids are opaque: COLLATE "C" compares bytes, so
-- the lock order of a batch's rows is the same on every server.

-- One row per (post, user): whether the user likes the post now, and the
-- version of the event that set it. Updates never touch the key, so the
-- free space left in each page lets them stay heap-only (HOT).
CREATE TABLE memberships (
    post_id            text COLLATE "C" NOT NULL,
    user_id            text COLLATE "C" NOT NULL,
    liked              boolean NOT NULL,
    seq                bigint NOT NULL,
    occurred_at_micros bigint NOT NULL,
    event_id           text COLLATE "C" NOT NULL,
    batch_id           text COLLATE "C" NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, user_id)
) WITH (fillfactor = 90);

-- A post's count is the sum of its shards; one shard may be negative (an
-- unlike can land on another shard than its like), the sum never is.
-- Every commit of a hot post updates one of them: half-empty pages keep
-- those updates heap-only.
CREATE TABLE counter_shards (
    post_id    text COLLATE "C" NOT NULL,
    shard      integer NOT NULL,
    likes      bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, shard)
) WITH (fillfactor = 50);

-- The effects an attempt of a batch committed: a later attempt of the same
-- batch finds it and reports them instead of applying anything.
CREATE TABLE batch_markers (
    consumer     text COLLATE "C" NOT NULL,
    batch_id     text COLLATE "C" NOT NULL,
    messages     integer NOT NULL,
    applied      bigint NOT NULL,
    duplicates   bigint NOT NULL,
    stale        bigint NOT NULL,
    poison       bigint NOT NULL,
    posts        integer NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (consumer, batch_id)
);
CREATE INDEX batch_markers_expires_at ON batch_markers (expires_at);

-- What is kept of a message that cannot be counted. Attribute keys are
-- values (an array), never column names.
CREATE TABLE quarantine (
    consumer             text COLLATE "C" NOT NULL,
    record_id            text COLLATE "C" NOT NULL,
    message_id           text NOT NULL,
    reason               text NOT NULL,
    data                 bytea NOT NULL,
    data_bytes           bigint NOT NULL,
    data_sha256          text NOT NULL,
    attribute_keys       text[] NOT NULL,
    attribute_values     text[] NOT NULL,
    attribute_count      integer NOT NULL,
    attributes_truncated boolean NOT NULL,
    batch_id             text COLLATE "C" NOT NULL,
    quarantined_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, record_id)
);
