package archiver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// chainLockSeconds is how long each finalization held its cluster's chain head: finalizations
// are serialized on it, so its sum over a second is the chain's utilisation.
var chainLockSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "jobvault_archiver_chain_lock_seconds",
	Help:    "Time each job finalization held the audit chain head locked (finalizations of a cluster are serialized on it).",
	Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
})

func init() {
	metrics.Registry.MustRegister(chainLockSeconds)
}

// Sealer finalizes a job's record and archive: it stores job.json, reads the job's rows back,
// hashes every object of the archive, marks the job archived or released and appends it to the
// cluster's audit chain in one transaction (Records.FinalizeJob), then stores the manifest that
// entry hashed. JobReconciler.finalize calls it before releasing the finalizer; it needs no
// cluster, so tests and benchmarks chain jobs through it directly.
//
// Idempotent, whatever step a crash interrupted: before the chain entry commits, a re-run starts
// over (same keys; the entry is not there, so no number was taken); after, it stores the entry's
// manifest bytes again and touches nothing else (job.json was stored, and hashed, before).
type Sealer struct {
	Records Records
	Store   objstore.Store
	Layout  archive.Layout
	Cluster string
	// RetainUntil, when not nil, gives the retain-until date of the final objects of a job
	// finalized at a time (Options.retainUntil); a zero date leaves them unlocked.
	RetainUntil func(finalizedAt time.Time) time.Time
}

// Sealed is the outcome of Seal.
type Sealed struct {
	Entry record.ChainEntry
	// Location is the archive's URL; Reason why it is released ("" if archived); Cause the metric
	// label of the first reason.
	Location, Reason, Cause string
	// At is the finalization time as recorded (microseconds, the database's precision).
	At time.Time
}

// Seal finalizes the job ref (see Sealer), whose final object is jobObject, released by an
// operator for operatorReason ("" if not), at now.
func (s Sealer) Seal(ctx context.Context, ref archive.JobRef, jobObject any, operatorReason string, now time.Time) (Sealed, error) {
	// At the database's precision, so that the digest of the job row computed here is the one the
	// database will give back.
	now = now.UTC().Truncate(time.Microsecond)
	keys, err := s.keys(ref)
	if err != nil {
		return Sealed{}, err
	}
	out := Sealed{Location: s.Store.URL(keys.dir + "/"), At: now}
	entry, chained, err := s.Records.ChainEntry(ctx, ref.UID)
	if err != nil {
		return Sealed{}, err
	}
	var retain time.Time
	if s.RetainUntil != nil {
		retain = s.RetainUntil(now)
	}
	var jobObjectEntry archive.ObjectEntry
	if !chained {
		if jobObjectEntry, err = s.putJSON(ctx, keys.object, jobObject, retain); err != nil {
			return Sealed{}, fmt.Errorf("store final object: %w", err)
		}
	}
	rec, err := s.read(ctx, ref.UID)
	if err != nil {
		return Sealed{}, err
	}
	// Anything missing (an operator's release, a pod not archived, a log unreadable or with a gap)
	// makes the job released, never archived.
	out.Reason, out.Cause = incompleteReason(operatorReason, rec.Pods, rec.Logs, rec.Gaps)
	if chained || rec.Job.ArchiveState != record.ArchivePending {
		// Finalized before (before the chain existed, or by a run that crashed after its commit):
		// the record says how.
		out.Reason, out.Location = rec.Job.ReleaseReason, rec.Job.ArchiveLocation
		if rec.Job.ArchivedAt != nil {
			out.At = *rec.Job.ArchivedAt
		}
	}
	if !chained {
		if entry, err = s.append(ctx, ref, rec, out, jobObjectEntry, retain); err != nil {
			return Sealed{}, err
		}
	}
	out.Entry = entry
	if _, err := s.putOnce(ctx, entry.ManifestKey, entry.Manifest, retain); err != nil {
		return Sealed{}, fmt.Errorf("store manifest: %w", err)
	}
	return out, nil
}

// jobKeys are the keys of a job's directory, final object and manifest.
type jobKeys struct{ dir, object, manifest string }

// keys names the job's objects. A job's identity comes from the API server, which validates it,
// so the layout refusing it is not expected; it would refuse it again at every try.
func (s Sealer) keys(ref archive.JobRef) (jobKeys, error) {
	dir, err := s.Layout.JobDir(ref)
	if err != nil {
		return jobKeys{}, err
	}
	// The same components as dir's: valid.
	object, _ := s.Layout.JobObject(ref)
	manifest, _ := s.Layout.Manifest(ref)
	return jobKeys{dir: dir, object: object, manifest: manifest}, nil
}

// append hashes the archive's objects, digests the rows as they will be once finalized, and
// appends the job to the chain, recording retain as the job's retain-until date (the date its
// final objects are locked until).
func (s Sealer) append(ctx context.Context, ref archive.JobRef, rec audit.Record, out Sealed, jobObject archive.ObjectEntry, retain time.Time) (record.ChainEntry, error) {
	row := rec.Job
	if row.ArchiveState == record.ArchivePending {
		row.ArchiveState, row.ArchiveLocation, row.ArchivedAt, row.ReleaseReason = record.ArchiveArchived, out.Location, &out.At, out.Reason
		if out.Reason != "" {
			row.ArchiveState = record.ArchiveReleased
		}
	}
	rec.Job = row
	objects, err := s.hashLogs(ctx, rec.Logs)
	if err != nil {
		return record.ChainEntry{}, err
	}
	objects = append([]archive.ObjectEntry{jobObject}, objects...)
	digest, rows := audit.RecordDigest(rec)
	keys, err := s.keys(ref)
	if err != nil {
		return record.ChainEntry{}, err
	}
	m := archive.BuildManifest(ref, row, rec.Pods, rec.Logs, rec.Gaps, keys.object, out.At)
	m.Cluster, m.Objects, m.RecordDigest, m.Rows = s.Cluster, objects, digest, rows
	fin, err := s.Records.FinalizeJob(ctx, record.Finalization{Cluster: s.Cluster, JobUID: ref.UID, Location: out.Location, ArchivedAt: out.At,
		ReleaseReason: out.Reason, ManifestKey: keys.manifest, RecordDigest: digest, RetainUntil: retain}, m.Seal)
	if err != nil {
		return record.ChainEntry{}, err
	}
	if fin.Appended {
		chainLockSeconds.Observe(fin.LockHeld.Seconds())
	}
	return fin.Entry, nil
}

// hashReaders bounds the stored logs of one job read back at once.
const hashReaders = 8

// hashLogs reads back every stored log of the job and hashes what the store holds, hashReaders at
// a time, in the order of logs: one after the other, a job of 1,000 pods waited for 1,000 reads
// before its release.
func (s Sealer) hashLogs(ctx context.Context, logs []record.LogObject) ([]archive.ObjectEntry, error) {
	var stored []record.LogObject
	for _, l := range logs {
		if l.State == record.LogStored {
			stored = append(stored, l)
		}
	}
	objects := make([]archive.ObjectEntry, len(stored))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(hashReaders)
	for i, l := range stored {
		g.Go(func() error {
			h, err := audit.HashObject(ctx, s.Store, l.ObjectKey, false)
			if err != nil {
				return fmt.Errorf("read back log %s: %w", l.ObjectKey, err)
			}
			objects[i] = h.ObjectEntry
			return nil
		})
	}
	return objects, g.Wait()
}

// read returns the job's rows.
func (s Sealer) read(ctx context.Context, uid string) (audit.Record, error) {
	var (
		rec audit.Record
		err error
	)
	if rec.Job, err = s.Records.Job(ctx, uid); err != nil {
		return rec, fmt.Errorf("read record: %w", err)
	}
	if rec.Transitions, err = s.Records.Transitions(ctx, uid); err != nil {
		return rec, fmt.Errorf("read transitions: %w", err)
	}
	if rec.Pods, err = s.Records.Pods(ctx, uid); err != nil {
		return rec, fmt.Errorf("read pod records: %w", err)
	}
	if rec.Logs, err = s.Records.LogObjects(ctx, uid); err != nil {
		return rec, fmt.Errorf("read log records: %w", err)
	}
	if rec.Gaps, err = s.Records.Gaps(ctx, uid); err != nil {
		return rec, fmt.Errorf("read log gaps: %w", err)
	}
	return rec, nil
}

// putJSON stores v as indented JSON at key, locked until retain (zero: unlocked), and returns the
// size and sha256 of the object stored there.
func (s Sealer) putJSON(ctx context.Context, key string, v any, retain time.Time) (archive.ObjectEntry, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return archive.ObjectEntry{}, err
	}
	kept, err := s.putOnce(ctx, key, b, retain)
	if err != nil || !kept {
		sum := sha256.Sum256(b)
		return archive.ObjectEntry{Key: key, Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, err
	}
	// An earlier pass stored it, locked: that object is the record, so hash what it holds.
	h, err := audit.HashObject(ctx, s.Store, key, false)
	return h.ObjectEntry, err
}

// putOnce stores b at key. Locked (retain not zero), an object is written once: when an earlier
// pass stored it (and then failed before the job was released), that one stands, rather than a
// second version (S3) or a refused overwrite (GCS, fs); kept says so.
func (s Sealer) putOnce(ctx context.Context, key string, b []byte, retain time.Time) (kept bool, err error) {
	if !retain.IsZero() {
		_, err := s.Store.Stat(ctx, key)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return false, err
		}
	}
	err = s.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{ContentType: "application/json", RetainUntil: retain})
	if errors.Is(err, objstore.ErrLocked) {
		return true, nil // stored and locked meanwhile by a concurrent pass
	}
	return false, err
}
