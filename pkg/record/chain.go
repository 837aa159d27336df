package record

import "time"

// Finalization is what finalizing a job writes beside its chain entry: the job's archive outcome
// (ReleaseReason empty: archived, else released), and what its entry records.
type Finalization struct {
	Cluster       string
	JobUID        string
	Location      string
	ArchivedAt    time.Time
	ReleaseReason string
	// ManifestKey is where the manifest is stored; RecordDigest digests the job's rows.
	ManifestKey  string
	RecordDigest string
	// RetainUntil is the job's retain-until date (zero: none), recorded in jobs.retain_until: the
	// date its final objects are locked until, after which the pruner may delete it.
	RetainUntil time.Time
	// Check, when not nil, is given the job's rows as the finalizing transaction reads them,
	// locked against change until it commits: an error (they are not the rows RecordDigest
	// digests, some changed since they were read) rolls the finalization back.
	Check func(JobRows) error
}

// JobRows are a job's rows, as one read gives them: its record, phase transitions, pods, and their
// logs and gaps.
type JobRows struct {
	Job         Job
	Transitions []Transition
	Pods        []Pod
	Logs        []LogObject
	Gaps        []Gap
}

// PruneCandidate is a finalized job whose retain-until date has passed and that no legal hold
// holds: its chain entry (whose manifest lists its objects) and its retain-until date.
type PruneCandidate struct {
	Entry       ChainEntry
	Namespace   string
	RetainUntil time.Time
}

// Prune records the deletion of a finalized job's rows and objects by the retention pruner. It is
// written before anything is deleted, so that no chain entry points at deleted data without it.
type Prune struct {
	Cluster        string
	Seq            int64
	JobUID         string
	ManifestSHA256 string
	RetainUntil    time.Time
	// Policy says which retention applied, e.g. "retention 720h0m0s".
	Policy string
	// Objects are the keys deleted: the manifest's objects and the manifest.
	Objects []string
	// PrunedAt is the pruner's time of decision.
	PrunedAt time.Time
}

// ChainEntry is one entry of a cluster's audit chain: a finalized job, numbered without gaps, its
// manifest's sha256 chained to the previous entry's.
type ChainEntry struct {
	Cluster        string
	Seq            int64
	JobUID         string
	ManifestKey    string
	ManifestSHA256 string
	// PrevSHA256 is the previous entry's ManifestSHA256, empty for the first.
	PrevSHA256   string
	RecordDigest string
	// Manifest is the manifest's exact bytes (ManifestSHA256 is their sha256).
	Manifest []byte
	At       time.Time
}

// ChainHead is the last entry of a cluster's chain (Seq 0 and no hash while it is empty).
type ChainHead struct {
	Cluster        string
	Seq            int64
	ManifestSHA256 string
}

// SignedDigest is a signed digest of a chain head, as stored in the database and the bucket.
type SignedDigest struct {
	Cluster    string
	At         time.Time
	Seq        int64
	HeadSHA256 string
	// PrevDigest is the previous digest's DigestSHA256, empty for the first.
	PrevDigest   string
	DigestSHA256 string
	ObjectKey    string
	// Document is the signed JSON document as stored at ObjectKey; DigestSHA256 is its sha256.
	Document []byte
}

// Seal makes the manifest of the chain entry numbered seq, whose previous entry's manifest has
// sha256 prev (empty for the first). It runs while the chain head is locked: keep it short (no
// I/O).
type Seal func(seq int64, prev string) ([]byte, error)

// Finalized is the outcome of finalizing a job into the chain.
type Finalized struct {
	Entry ChainEntry
	// Appended is false when the job was already in the chain (a repeated finalization).
	Appended bool
	// LockHeld is how long the chain head was locked (zero when not Appended).
	LockHeld time.Duration
}
