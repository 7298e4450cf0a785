-- A user's memberships found by user id: `hotcount users export` and
-- `hotcount users erase` read them (an access request, an erasure) without
-- scanning every membership. The primary key leads with post_id, so it
-- cannot serve this. The counting path never uses it; its cost is one
-- index entry per membership, written when a membership is created only
-- (an update of liked/seq/... leaves user_id alone, so stays HOT-capable
-- only if no indexed column changes: none here does).
CREATE INDEX memberships_user_id ON memberships (user_id);

-- Erased users' tombstones: the keyed hash (HMAC-SHA256, hex) of each
-- erased user id, never the id. The pipeline drops every event of a user
-- whose hash is here; `hotcount users restore` deletes the row.
CREATE TABLE erased_users (
    user_hash  text COLLATE "C" NOT NULL,
    erased_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_hash)
);
