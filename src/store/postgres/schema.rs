//! Every SQL statement the PostgreSQL store runs on its tables (the
//! batch transaction, the operator reads, rollups, milestones, the data
//! format): the tables they name are created by [`migrations`](super::migrations).
//!
//! Invariants: ids and every other value reach the server only as bind
//! parameters, never spliced into SQL (the one splice is the constant
//! [`ROLLUP_CHANNEL`], at compile time).

/// Opens a batch's transaction. READ COMMITTED is named rather than taken
/// from the server's default, which an operator may have changed; why this
/// level is in the `postgres` module docs.
pub const BEGIN_BATCH: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Opens a consistent read-only snapshot (reports, reconcile).
pub const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// Opens a repair: its reads are one snapshot, and its write fails with
/// 40001 if a row it writes changed since that snapshot.
pub const BEGIN_REPAIR: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ";

/// Ends a transaction, applying it.
pub const COMMIT: &str = "COMMIT";

/// Ends a transaction without applying it.
pub const ROLLBACK: &str = "ROLLBACK";

/// The effects a committed attempt recorded: `$1` consumer, `$2` batch id.
pub const READ_MARKER: &str = "SELECT applied, duplicates, stale, poison
    FROM batch_markers WHERE consumer = $1 AND batch_id = $2";

/// Reads and locks the batch's existing memberships, in key order (so two
/// batches lock their common rows in one order): `$1` post ids, `$2` user
/// ids, pairwise.
pub const LOCK_MEMBERSHIPS: &str = "SELECT m.post_id, m.user_id, m.liked, m.seq,
        m.occurred_at_micros, m.event_id
    FROM memberships AS m
    JOIN unnest($1::text[], $2::text[]) AS k(post_id, user_id)
      ON m.post_id = k.post_id AND m.user_id = k.user_id
    ORDER BY m.post_id, m.user_id
    FOR UPDATE OF m";

/// Reads memberships without locking (replay's dry run): as [`LOCK_MEMBERSHIPS`].
pub const READ_MEMBERSHIPS: &str = "SELECT m.post_id, m.user_id, m.liked, m.seq,
        m.occurred_at_micros, m.event_id
    FROM memberships AS m
    JOIN unnest($1::text[], $2::text[]) AS k(post_id, user_id)
      ON m.post_id = k.post_id AND m.user_id = k.user_id";

/// Every membership of one user (`$1`), by post: `users export` and
/// `users erase` (served by the index `memberships_user_id`).
pub const READ_USER_MEMBERSHIPS: &str = "SELECT post_id, user_id, liked, seq,
        occurred_at_micros, event_id,
        (extract(epoch FROM updated_at) * 1000000)::int8
    FROM memberships WHERE user_id = $1 ORDER BY post_id";

/// Every user id that has a membership (`users reapply`; served by the
/// index `memberships_user_id`).
pub const READ_USER_IDS: &str = "SELECT DISTINCT user_id FROM memberships";

/// Every erased user's keyed hash (the pipeline's tombstone set).
pub const READ_TOMBSTONES: &str = "SELECT user_hash FROM erased_users";

/// The tombstones' generation and every erased user's keyed hash, in one
/// snapshot.
pub const READ_TOMBSTONE_STATE: &str = "SELECT
    COALESCE((SELECT generation FROM tombstone_generation), 0),
    ARRAY(SELECT user_hash FROM erased_users)";

/// A checked batch's read of the tombstones' generation: `FOR SHARE`, so a
/// bump waits until the batch's transaction ends, and (at READ COMMITTED)
/// the latest committed value, after waiting for a bump in progress.
pub const READ_TOMBSTONE_GENERATION: &str = "SELECT generation FROM tombstone_generation FOR SHARE";

/// Writes the tombstone `$1` (a keyed hash) if absent, and bumps the
/// tombstones' generation, in one statement.
pub const WRITE_TOMBSTONE: &str = "WITH tombstone AS (
        INSERT INTO erased_users (user_hash) VALUES ($1)
        ON CONFLICT (user_hash) DO NOTHING)
    UPDATE tombstone_generation SET generation = generation + 1, updated_at = now()";

/// Deletes the tombstone `$1`; one row back if it existed.
pub const DELETE_TOMBSTONE: &str = "DELETE FROM erased_users WHERE user_hash = $1 RETURNING 1";

/// Deletes the memberships of user `$1` on posts `$2` that are in an
/// erasure's state (`$3` its seq, `$4` its event id, not liked): what an
/// erasure committed, and nothing a later event changed.
pub const DELETE_ERASED_MEMBERSHIPS: &str = "DELETE FROM memberships
    WHERE user_id = $1 AND post_id = ANY($2::text[])
      AND NOT liked AND seq = $3 AND event_id = $4";

/// Writes the new state of memberships the batch read (and locked):
/// `$1` post ids, `$2` user ids, `$3` liked, `$4` seq, `$5` occurred-at
/// micros, `$6` event ids (pairwise), `$7` the batch id.
pub const UPDATE_MEMBERSHIPS: &str = "UPDATE memberships AS m
    SET liked = u.liked, seq = u.seq, occurred_at_micros = u.occurred_at_micros,
        event_id = u.event_id, batch_id = $7, updated_at = now()
    FROM unnest($1::text[], $2::text[], $3::bool[], $4::int8[], $5::int8[], $6::text[])
        AS u(post_id, user_id, liked, seq, occurred_at_micros, event_id)
    WHERE m.post_id = u.post_id AND m.user_id = u.user_id";

/// Creates the memberships the batch read as absent, parameters as
/// [`UPDATE_MEMBERSHIPS`]. No `ON CONFLICT`: a row another transaction
/// inserted since the read makes this statement fail (23505, contention),
/// so a plan computed from "absent" never overwrites a row it did not see.
pub const INSERT_MEMBERSHIPS: &str = "INSERT INTO memberships
        (post_id, user_id, liked, seq, occurred_at_micros, event_id, batch_id)
    SELECT u.post_id, u.user_id, u.liked, u.seq, u.occurred_at_micros, u.event_id, $7
    FROM unnest($1::text[], $2::text[], $3::bool[], $4::int8[], $5::int8[], $6::text[])
        AS u(post_id, user_id, liked, seq, occurred_at_micros, event_id)
    ORDER BY u.post_id, u.user_id";

/// Adds each post's delta to one of its counter shards, creating it if
/// needed: `$1` post ids, `$2` shards, `$3` deltas (one row per post).
/// `likes + excluded.likes` is evaluated on the row's latest version, so
/// increments of concurrent transactions add up, never overwrite.
pub const ADD_TO_COUNTER_SHARDS: &str = "INSERT INTO counter_shards AS c (post_id, shard, likes)
    SELECT d.post_id, d.shard, d.likes
    FROM unnest($1::text[], $2::int4[], $3::int8[]) AS d(post_id, shard, likes)
    ORDER BY d.post_id, d.shard
    ON CONFLICT (post_id, shard)
    DO UPDATE SET likes = c.likes + excluded.likes, updated_at = now()";

/// Records the batch's effects: `$1` consumer, `$2` batch id, `$3`
/// messages, `$4` applied, `$5` duplicates, `$6` stale, `$7` poison, `$8`
/// posts, `$9` seconds to keep it, `$10` the posts incremented (the rollup
/// due record, waiting from now; NULL: none). No `ON CONFLICT`: an earlier
/// attempt's marker committed since the read makes this attempt fail
/// (23505) and the next one report the earlier effects.
pub const INSERT_MARKER: &str = "INSERT INTO batch_markers
        (consumer, batch_id, messages, applied, duplicates, stale, poison, posts, expires_at,
         rollup_posts, rollup_due)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + $9::int8 * interval '1 second',
        $10::text[], CASE WHEN $10::text[] IS NULL THEN NULL ELSE now() END)";

/// Takes over up to `$2` rollup due records waiting longer than `$1`
/// milliseconds (the server's clock), skipping rows another transaction
/// holds, and restarts their wait: consumer, batch id, posts.
pub const TAKE_OVER_DUE: &str = "UPDATE batch_markers AS b SET rollup_due = now()
    FROM (SELECT consumer, batch_id FROM batch_markers
          WHERE rollup_due <= now() - $1::int8 * interval '1 millisecond'
          ORDER BY rollup_due
          LIMIT $2::int8
          FOR UPDATE SKIP LOCKED) AS d
    WHERE b.consumer = d.consumer AND b.batch_id = d.batch_id
    RETURNING b.consumer, b.batch_id, b.rollup_posts";

/// Clears the rollup due records `$1` consumers, `$2` batch ids (pairwise).
pub const CLEAR_DUE: &str = "UPDATE batch_markers AS b SET rollup_due = NULL, rollup_posts = NULL
    FROM unnest($1::text[], $2::text[]) AS d(consumer, batch_id)
    WHERE b.consumer = d.consumer AND b.batch_id = d.batch_id AND b.rollup_due IS NOT NULL";

/// Writes (or, for a redelivered message, rewrites) one quarantine record:
/// `$1` consumer, `$2` record id, `$3` message id, `$4` reason, `$5` data,
/// `$6` data bytes, `$7` data SHA-256, `$8` attribute keys, `$9` attribute
/// values, `$10` attribute count, `$11` attributes truncated, `$12` batch id.
pub const UPSERT_QUARANTINE: &str = "INSERT INTO quarantine AS q
        (consumer, record_id, message_id, reason, data, data_bytes, data_sha256,
         attribute_keys, attribute_values, attribute_count, attributes_truncated, batch_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    ON CONFLICT (consumer, record_id) DO UPDATE SET
        message_id = excluded.message_id, reason = excluded.reason, data = excluded.data,
        data_bytes = excluded.data_bytes, data_sha256 = excluded.data_sha256,
        attribute_keys = excluded.attribute_keys, attribute_values = excluded.attribute_values,
        attribute_count = excluded.attribute_count,
        attributes_truncated = excluded.attributes_truncated,
        batch_id = excluded.batch_id, quarantined_at = now()";

/// Every statement a batch's commit runs, prepared once per connection.
pub const COMMIT_STATEMENTS: [&str; 8] = [
    READ_MARKER,
    READ_TOMBSTONE_GENERATION,
    LOCK_MEMBERSHIPS,
    UPDATE_MEMBERSHIPS,
    INSERT_MEMBERSHIPS,
    ADD_TO_COUNTER_SHARDS,
    INSERT_MARKER,
    UPSERT_QUARANTINE,
];

/// A post's count: `$1` post id.
pub const COUNT: &str =
    "SELECT COALESCE(sum(likes), 0)::int8 FROM counter_shards WHERE post_id = $1";

/// Liked memberships per post, every post.
pub const LIKED_PER_POST: &str =
    "SELECT post_id, count(*)::int8 FROM memberships WHERE liked GROUP BY post_id";

/// Counter sums per post, every post.
pub const SHARDS_PER_POST: &str =
    "SELECT post_id, sum(likes)::int8 FROM counter_shards GROUP BY post_id";

/// Liked memberships of post `$1`.
pub const LIKED_OF_POST: &str =
    "SELECT count(*)::int8 FROM memberships WHERE post_id = $1 AND liked";

/// A reconcile correction: adds `$2` to shard 0 of post `$1`.
pub const CORRECT_SHARD_ZERO: &str = "INSERT INTO counter_shards AS c (post_id, shard, likes)
    VALUES ($1, 0, $2)
    ON CONFLICT (post_id, shard)
    DO UPDATE SET likes = c.likes + excluded.likes, updated_at = now()";

/// The channel a rollup write notifies, with the post id as the payload
/// (a macro, so the statements below can splice it in at compile time).
macro_rules! rollup_channel {
    () => {
        "hotcount_counts"
    };
}

/// The channel a rollup write notifies, with the post id as the payload.
pub const ROLLUP_CHANNEL: &str = rollup_channel!();

/// Each post of `$1` (in that order): the sum of its counter shards, its
/// rollup's `likes` and `as_of` (microseconds; NULL without a rollup), and
/// the statement's time (microseconds), which is no later than the
/// snapshot the statement reads: every commit acknowledged before it is
/// in the sums.
pub const READ_ROLLUPS: &str = "SELECT k.post_id,
        COALESCE((SELECT sum(s.likes) FROM counter_shards AS s
                  WHERE s.post_id = k.post_id), 0)::int8,
        c.likes,
        (extract(epoch FROM c.as_of) * 1000000)::int8,
        (extract(epoch FROM statement_timestamp()) * 1000000)::int8
    FROM unnest($1::text[]) WITH ORDINALITY AS k(post_id, i)
    LEFT JOIN post_counts AS c ON c.post_id = k.post_id
    ORDER BY k.i";

/// Writes rollups read at one snapshot: `$1` post ids, `$2` their sums,
/// `$3` the snapshot's time (microseconds), only over rows with an older
/// `as_of`; returns (and notifies [`ROLLUP_CHANNEL`] of) each post written.
/// In the same statement (atomically), inserts the milestone rows `$4`
/// (posts) / `$5` (milestones) / `$6` (likes) of the posts written, each
/// reached at `$3`, due at once (the epoch: whatever the replicas' clocks
/// say against the server's), if absent.
pub const WRITE_ROLLUPS: &str = concat!(
    "WITH written AS (
        INSERT INTO post_counts AS c (post_id, likes, as_of, updated_at)
        SELECT w.post_id, w.likes,
               timestamptz 'epoch' + $3::int8 * interval '1 microsecond', now()
        FROM unnest($1::text[], $2::int8[]) AS w(post_id, likes)
        ORDER BY w.post_id
        ON CONFLICT (post_id) DO UPDATE
            SET likes = excluded.likes, as_of = excluded.as_of, updated_at = excluded.updated_at
            WHERE c.as_of < excluded.as_of
        RETURNING c.post_id),
    recorded AS (
        INSERT INTO milestones (post_id, milestone, likes, reached_at, due_at)
        SELECT m.post_id, m.milestone, m.likes,
               timestamptz 'epoch' + $3::int8 * interval '1 microsecond',
               timestamptz 'epoch'
        FROM unnest($4::text[], $5::int8[], $6::int8[]) AS m(post_id, milestone, likes)
        JOIN written AS w ON w.post_id = m.post_id
        ORDER BY m.post_id, m.milestone
        ON CONFLICT (post_id, milestone) DO NOTHING)
    SELECT post_id, pg_notify('",
    rollup_channel!(),
    "', post_id) FROM written"
);

/// The columns of a milestone row, times in microseconds.
macro_rules! milestone_columns {
    ($t:literal) => {
        concat!(
            $t,
            ".post_id, ",
            $t,
            ".milestone, ",
            $t,
            ".likes, (extract(epoch FROM ",
            $t,
            ".reached_at) * 1000000)::int8, ",
            $t,
            ".status, ",
            $t,
            ".attempts, (extract(epoch FROM ",
            $t,
            ".due_at) * 1000000)::int8, ",
            $t,
            ".last_error, (extract(epoch FROM ",
            $t,
            ".delivered_at) * 1000000)::int8"
        )
    };
}

/// Claims up to `$2` milestone rows due at the server's `now()`, skipping
/// rows another transaction holds, leasing each until `now()` plus `$1`
/// microseconds with one more attempt; returns them, each with `now()` in
/// microseconds (the lease's start, in the server's time).
pub const CLAIM_MILESTONES: &str = concat!(
    "WITH due AS (
        SELECT post_id, milestone FROM milestones
        WHERE due_at <= now()
          AND status IN ('pending', 'leased')
        ORDER BY due_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    UPDATE milestones AS m
    SET status = 'leased', attempts = m.attempts + 1,
        lease_until = now() + $1::int8 * interval '1 microsecond',
        due_at = now() + $1::int8 * interval '1 microsecond',
        updated_at = now()
    FROM due WHERE m.post_id = due.post_id AND m.milestone = due.milestone
    RETURNING ",
    milestone_columns!("m"),
    ", (extract(epoch FROM now()) * 1000000)::int8"
);

/// Settles the milestone row `$1`/`$2` of attempt `$3` while it is still
/// leased to that attempt: status `$4`, due `$5` microseconds after the
/// server's `now()` (NULL: not due again), last error `$6` (kept when
/// NULL), delivered at `$7`.
pub const SETTLE_MILESTONE: &str = "UPDATE milestones
    SET status = $4, lease_until = NULL,
        due_at = now() + $5::int8 * interval '1 microsecond',
        last_error = COALESCE($6, last_error),
        delivered_at = timestamptz 'epoch' + $7::int8 * interval '1 microsecond',
        updated_at = now()
    WHERE post_id = $1 AND milestone = $2 AND attempts = $3 AND status = 'leased'";

/// Every milestone row, oldest first.
pub const LIST_MILESTONES: &str = concat!(
    "SELECT ",
    milestone_columns!("m"),
    " FROM milestones AS m ORDER BY m.reached_at, m.post_id, m.milestone"
);

/// Makes pending again, due at once (the epoch, whatever the clocks say),
/// the dead rows (`$1` NULL) or the row `$1`/`$2` if dead or pending.
/// `attempts` keeps counting: it is the settles' fence, so a settle of an
/// attempt from before the retry never matches an attempt after it.
pub const RETRY_MILESTONES: &str = "UPDATE milestones
    SET status = 'pending', lease_until = NULL,
        due_at = timestamptz 'epoch',
        updated_at = now()
    WHERE ($1::text IS NULL AND status = 'dead')
       OR (post_id = $1 AND milestone = $2 AND status IN ('dead', 'pending'))";

/// The fleet's milestone setting (no row: none stored).
pub const READ_MILESTONE_SETTING: &str = "SELECT enabled, milestones FROM milestone_settings";

/// Stores the fleet's milestone setting (`$1` enabled, `$2` the list),
/// replacing any; returns it.
pub const STORE_MILESTONE_SETTING: &str =
    "INSERT INTO milestone_settings (enabled, milestones) VALUES ($1, $2)
    ON CONFLICT (singleton) DO UPDATE
        SET enabled = excluded.enabled, milestones = excluded.milestones, updated_at = now()
    RETURNING enabled, milestones";

/// Stores the fleet's milestone setting only if none is; returns it when
/// stored (no row: one was there, read it).
pub const ADOPT_MILESTONE_SETTING: &str =
    "INSERT INTO milestone_settings (enabled, milestones) VALUES ($1, $2)
    ON CONFLICT (singleton) DO NOTHING
    RETURNING enabled, milestones";

/// The stored data format (no row: none recorded, format 1).
pub const READ_DATA_FORMAT: &str = "SELECT version FROM data_format";

/// Raises the stored data format to `$1` unless it is as high already
/// (never lowers it); returns the format stored after.
pub const RAISE_DATA_FORMAT: &str = "INSERT INTO data_format (version) VALUES ($1)
    ON CONFLICT (singleton) DO UPDATE
        SET version = greatest(data_format.version, excluded.version),
            updated_at = CASE WHEN excluded.version > data_format.version
                THEN now() ELSE data_format.updated_at END
    RETURNING version";

/// Posts whose counter shards changed at or after `$1` (microseconds) and
/// whose rollup is missing or differs from the sum of their shards.
pub const CHANGED_ROLLUPS: &str = "SELECT ch.post_id
    FROM (SELECT DISTINCT post_id FROM counter_shards
          WHERE updated_at >= timestamptz 'epoch' + $1::int8 * interval '1 microsecond') AS ch
    LEFT JOIN post_counts AS c ON c.post_id = ch.post_id
    WHERE c.likes IS DISTINCT FROM
        (SELECT sum(s.likes) FROM counter_shards AS s WHERE s.post_id = ch.post_id)";

/// Every rollup: post, `likes`, `as_of` (microseconds).
pub const ALL_ROLLUPS: &str = "SELECT post_id, likes,
        (extract(epoch FROM as_of) * 1000000)::int8
    FROM post_counts";

/// Quarantine records, oldest first: of consumer `$1` (all when NULL), at
/// most `$2` (all when NULL).
pub const LIST_QUARANTINE: &str = "SELECT consumer, record_id, message_id, reason, data,
        data_bytes, data_sha256, attribute_keys, attribute_values, attribute_count,
        attributes_truncated, batch_id, quarantined_at::text
    FROM quarantine WHERE ($1::text IS NULL OR consumer = $1)
    ORDER BY quarantined_at, consumer, record_id
    LIMIT $2::int8";

/// One quarantine record, columns as [`LIST_QUARANTINE`]: `$1` consumer,
/// `$2` record id.
pub const READ_QUARANTINE_RECORD: &str = "SELECT consumer, record_id, message_id, reason, data,
        data_bytes, data_sha256, attribute_keys, attribute_values, attribute_count,
        attributes_truncated, batch_id, quarantined_at::text
    FROM quarantine WHERE consumer = $1 AND record_id = $2";

/// Deletes one quarantine record: `$1` consumer, `$2` record id.
pub const DELETE_QUARANTINE_RECORD: &str =
    "DELETE FROM quarantine WHERE consumer = $1 AND record_id = $2 RETURNING 1";

/// Deletes up to `$1` expired batch markers, oldest first; skips rows
/// another cleanup holds.
pub const DELETE_EXPIRED_MARKERS: &str = "DELETE FROM batch_markers
    WHERE (consumer, batch_id) IN (
        SELECT consumer, batch_id FROM batch_markers
        WHERE expires_at < now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED)
    RETURNING 1";
