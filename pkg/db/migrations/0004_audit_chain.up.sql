-- The audit chain: every finalized job (archived or released) gets a gapless per-cluster sequence
-- number, and its manifest's sha256 is chained to the previous manifest's. See pkg/audit.
--
-- Gapless: the number is taken from the cluster's head row, locked (SELECT ... FOR UPDATE) in the
-- transaction that marks the job finalized and inserts its chain entry. A failed or interrupted
-- transaction takes no number (a SEQUENCE would leave a hole); a committed one is durable with the
-- entry it numbered, across restarts, crashes and failovers alike.

-- Retention (kept here so the schema changes once): when a job's rows and objects may be deleted,
-- and whether a legal hold forbids it. Not used yet.
ALTER TABLE jobs
    ADD COLUMN retain_until timestamptz,
    ADD COLUMN legal_hold   boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN jobs.retain_until IS 'Rows and objects of the job may be deleted after this time (retention policy); NULL: not decided.';
COMMENT ON COLUMN jobs.legal_hold IS 'A legal hold forbids deleting the job''s rows and objects, whatever retain_until says.';

-- jobvault_refuse_change: the chain and its signed digests are append-only.
CREATE FUNCTION jobvault_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % refused: the audit chain is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

COMMENT ON FUNCTION jobvault_refuse_change() IS
    'BEFORE UPDATE/DELETE/TRUNCATE trigger: refuses any change to an append-only audit table.';

-- jobvault_freeze_finalized keeps what a finalized job's chain entry digests (see audit.RecordDigest):
-- once archived or released, the job row's record of what ran and how it ended is final. The
-- archiver's upserts after that (labels and annotations, such as its own archived-at) still apply.
-- It overrides rather than refuses, so those upserts keep working.
CREATE FUNCTION jobvault_freeze_finalized() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.archive_state <> 'pending' THEN
        NEW.uid              := OLD.uid;
        NEW.cluster          := OLD.cluster;
        NEW.namespace        := OLD.namespace;
        NEW.name             := OLD.name;
        NEW.queue            := OLD.queue;
        NEW.submitter        := OLD.submitter;
        NEW.submitter_groups := OLD.submitter_groups;
        NEW.admitted_at      := OLD.admitted_at;
        NEW.created_at       := OLD.created_at;
        NEW.finished_at      := OLD.finished_at;
        NEW.phase            := OLD.phase;
        NEW.retry_count      := OLD.retry_count;
        NEW.spec             := OLD.spec;
        NEW.status           := OLD.status;
        NEW.archive_state    := OLD.archive_state;
        NEW.archive_location := OLD.archive_location;
        NEW.archived_at      := OLD.archived_at;
        NEW.release_reason   := OLD.release_reason;
    END IF;
    RETURN NEW;
END
$$;

-- Named to fire before jobs_touch (triggers fire in name order), which then skips a no-op update.
CREATE TRIGGER jobs_freeze_finalized BEFORE UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobvault_freeze_finalized();

-- The same for a pod once archived or released: its row is digested with its job's.
CREATE FUNCTION jobvault_freeze_finalized_pod() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.archive_state <> 'pending' THEN
        NEW.uid                     := OLD.uid;
        NEW.job_uid                 := OLD.job_uid;
        NEW.namespace               := OLD.namespace;
        NEW.name                    := OLD.name;
        NEW.task                    := OLD.task;
        NEW.node                    := OLD.node;
        NEW.phase                   := OLD.phase;
        NEW.created_at              := OLD.created_at;
        NEW.started_at              := OLD.started_at;
        NEW.finished_at             := OLD.finished_at;
        NEW.deleted_before_terminal := OLD.deleted_before_terminal;
        NEW.archive_state           := OLD.archive_state;
        NEW.archived_at             := OLD.archived_at;
        NEW.release_reason          := OLD.release_reason;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER pods_freeze_finalized BEFORE UPDATE ON pods
    FOR EACH ROW EXECUTE FUNCTION jobvault_freeze_finalized_pod();

CREATE TABLE audit_chain_heads (
    cluster         text        PRIMARY KEY,
    seq             bigint      NOT NULL CHECK (seq >= 0),
    manifest_sha256 text        NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE audit_chain_heads IS
    'The last entry of each cluster''s audit chain; its row lock serializes the numbering of finalized jobs.';

CREATE TABLE audit_chain (
    cluster         text        NOT NULL,
    seq             bigint      NOT NULL CHECK (seq >= 1),
    -- No foreign key: the entry outlives the job's rows once retention deletes them.
    job_uid         text        NOT NULL UNIQUE,
    manifest_key    text        NOT NULL,
    manifest_sha256 text        NOT NULL CHECK (manifest_sha256 ~ '^[0-9a-f]{64}$'),
    -- The previous entry's manifest_sha256; '' for seq 1.
    prev_sha256     text        NOT NULL CHECK (prev_sha256 = '' OR prev_sha256 ~ '^[0-9a-f]{64}$'),
    record_digest   text        NOT NULL CHECK (record_digest ~ '^[0-9a-f]{64}$'),
    -- The manifest's exact bytes, so that a finalization interrupted after this commit stores the
    -- very object this entry hashed.
    manifest        bytea       NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, seq)
);

COMMENT ON TABLE audit_chain IS
    'One entry per finalized job: its gapless per-cluster sequence number, its manifest (key, sha256, bytes), the previous manifest''s sha256 and the digest of its rows. Append-only.';

CREATE TRIGGER audit_chain_append_only BEFORE UPDATE OR DELETE ON audit_chain
    FOR EACH ROW EXECUTE FUNCTION jobvault_refuse_change();
CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON audit_chain
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_refuse_change();

CREATE TABLE audit_digests (
    cluster         text        NOT NULL,
    at              timestamptz NOT NULL,
    seq             bigint      NOT NULL CHECK (seq >= 0),
    head_sha256     text        NOT NULL,
    prev_digest     text        NOT NULL,
    digest_sha256   text        NOT NULL CHECK (digest_sha256 ~ '^[0-9a-f]{64}$'),
    object_key      text        NOT NULL,
    -- The signed document as stored in the bucket (JSON with its ed25519 signature).
    document        bytea       NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, at)
);

COMMENT ON TABLE audit_digests IS
    'Signed digests of each cluster''s chain head (seq, manifest sha256, time, previous digest), written periodically. Append-only.';

CREATE TRIGGER audit_digests_append_only BEFORE UPDATE OR DELETE ON audit_digests
    FOR EACH ROW EXECUTE FUNCTION jobvault_refuse_change();
CREATE TRIGGER audit_digests_no_truncate BEFORE TRUNCATE ON audit_digests
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_refuse_change();
