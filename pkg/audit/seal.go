package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/metrics"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// SealerRecords is what the Sealer reads and writes in the database (implemented by *db.DB): the
// job's rows, and its entry in the chain.
type SealerRecords interface {
	Job(ctx context.Context, uid string) (record.Job, error)
	Transitions(ctx context.Context, jobUID string) ([]record.Transition, error)
	Pods(ctx context.Context, jobUID string) ([]record.Pod, error)
	LogObjects(ctx context.Context, jobUID string) ([]record.LogObject, error)
	Gaps(ctx context.Context, jobUID string) ([]record.Gap, error)
	ChainEntry(ctx context.Context, jobUID string) (record.ChainEntry, bool, error)
	FinalizeJob(ctx context.Context, f record.Finalization, seal record.Seal) (record.Finalized, error)
}

// Sealer finalizes a job's record and archive: it stores job.json, reads the job's rows back,
// hashes every object of the archive, marks the job archived or released and appends it to the
// cluster's audit chain in one transaction (Records.FinalizeJob), then stores the manifest that
// entry hashed. pkg/archiver's JobReconciler.finalize calls it before releasing the finalizer; it needs no
// cluster, so tests and benchmarks chain jobs through it directly.
//
// Idempotent, whatever step a crash interrupted: before the chain entry commits, a re-run starts
// over (same keys; the entry is not there, so no number was taken); after, it stores the entry's
// manifest bytes again and touches nothing else (job.json was stored, and hashed, before).
type Sealer struct {
	Records SealerRecords
	Store   objstore.Store
	Layout  archive.Layout
	Cluster string
	// RetainUntil, when not nil, gives the retain-until date of the final objects of a job
	// finalized at a time (the archiver's --retention, or the namespace's: pkg/retention); a zero date leaves them unlocked.
	RetainUntil func(finalizedAt time.Time) time.Time
	// Refused says why the database refused part of the job's record ("" if it did not): the job
	// is then released with it (pkg/archiver's JobReconciler.record).
	Refused string
	// GiveUp: a stored log that cannot be read back for a reason that may heal (the store
	// failing) is recorded as unreadable, and the job released, instead of the seal failing to be
	// tried again (its deadline passed, or an operator released it). A log gone from the store, or
	// not holding what its record says, is unreadable at once: that does not heal.
	GiveUp bool
	// Settled, when not nil, is called before the job is appended to the chain, after which its
	// record cannot change, and must return nil for the seal to go on: a check that ran beside
	// the seal's reads (the archiver's list of the job's pods outside its cache) and says whether
	// they read the whole record.
	Settled func(context.Context) error
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
	var hashed hashedLogs
	if !chained {
		if err := s.sweepSegments(ctx, ref, rec.Pods); err != nil && !s.GiveUp {
			return Sealed{}, err
		}
		if hashed, err = s.hashLogs(ctx, rec.Logs); err != nil {
			return Sealed{}, err
		}
	}
	// Anything missing (an operator's release, a pod not archived, a log unreadable or with a gap,
	// a stored log unreadable now, a record refused) makes the job released, never archived.
	out.Reason, out.Cause = record.IncompleteReason(operatorReason, rec.Pods, rec.Logs, rec.Gaps)
	out.Reason, out.Cause = record.WithReason(out.Reason, out.Cause, hashed.unreadableReason(), "unreadable")
	out.Reason, out.Cause = record.WithReason(out.Reason, out.Cause, s.Refused, "refused")
	if chained || rec.Job.ArchiveState != record.ArchivePending {
		// Finalized before (before the chain existed, or by a run that crashed after its commit):
		// the record says how.
		out.Reason, out.Location = rec.Job.ReleaseReason, rec.Job.ArchiveLocation
		if rec.Job.ArchivedAt != nil {
			out.At = *rec.Job.ArchivedAt
		}
	}
	if !chained && s.Settled != nil {
		if err := s.Settled(ctx); err != nil {
			return Sealed{}, err
		}
	}
	if !chained {
		if entry, err = s.append(ctx, ref, rec, out, append([]archive.ObjectEntry{jobObjectEntry}, hashed.objects...), retain); err != nil {
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

// append digests the rows as they will be once finalized and appends the job to the chain with the
// archive's objects as hashed, recording retain as the job's retain-until date (the date its final
// objects are locked until).
func (s Sealer) append(ctx context.Context, ref archive.JobRef, rec Record, out Sealed, objects []archive.ObjectEntry, retain time.Time) (record.ChainEntry, error) {
	row := finalizedRow(rec.Job, out)
	rec.Job = row
	digest, rows := RecordDigest(rec)
	keys, err := s.keys(ref)
	if err != nil {
		return record.ChainEntry{}, err
	}
	m := archive.BuildManifest(ref, row, rec.Pods, rec.Logs, rec.Gaps, keys.object, out.At)
	m.Cluster, m.Objects, m.RecordDigest, m.Rows = s.Cluster, objects, digest, rows
	nameStreams(&m)
	// The rows were read, and the objects hashed, before the finalizing transaction: it checks,
	// with the rows locked, that they are still the ones digested, so that the chain seals exactly
	// what it finalizes, and that the stored hashes listed without a read still stand (a second
	// write of a log drops its row's: pkg/db's PutLogObject).
	trusted := storedHashes(rec.Logs)
	check := func(now record.JobRows) error {
		now.Job = finalizedRow(now.Job, out)
		if d, _ := RecordDigest(Record(now)); d != digest || !maps.Equal(storedHashes(now.Logs), trusted) {
			return errRowsChanged
		}
		return nil
	}
	fin, err := s.Records.FinalizeJob(ctx, record.Finalization{Cluster: s.Cluster, JobUID: ref.UID, Location: out.Location, ArchivedAt: out.At,
		ReleaseReason: out.Reason, ManifestKey: keys.manifest, RecordDigest: digest, RetainUntil: retain, Check: check}, m.Seal)
	if err != nil {
		return record.ChainEntry{}, err
	}
	if fin.Appended {
		metrics.ChainLockSeconds.Observe(fin.LockHeld.Seconds())
	}
	return fin.Entry, nil
}

// storedHashes returns the stored sha256 the store checked at the write of each log that has
// one (record.LogObject.StoredSHA256), by object key.
func storedHashes(logs []record.LogObject) map[string]string {
	out := map[string]string{}
	for _, l := range logs {
		if l.State == record.LogStored && l.StoredSHA256 != "" {
			out[l.ObjectKey] = l.StoredSHA256
		}
	}
	return out
}

// nameStreams names, in each log entry of m, the stream index beside its log when m's objects list
// one (hashed there, as every object of the archive).
func nameStreams(m *archive.Manifest) {
	listed := map[string]bool{}
	for _, o := range m.Objects {
		listed[o.Key] = true
	}
	for _, p := range m.Pods {
		for i, l := range p.Logs {
			if l.Key != "" && listed[l.Key+archive.StreamsSuffix] {
				p.Logs[i].Streams = l.Key + archive.StreamsSuffix
			}
		}
	}
}

// errRowsChanged fails a finalization whose job's rows changed after the Sealer read them; the
// next pass reads them again.
var errRowsChanged = errors.New("the job's rows changed while it was being sealed")

// finalizedRow is the job's row as the finalization out leaves it.
func finalizedRow(row record.Job, out Sealed) record.Job {
	if row.ArchiveState == record.ArchivePending {
		row.ArchiveState, row.ArchiveLocation, row.ArchivedAt, row.ReleaseReason = record.ArchiveArchived, out.Location, &out.At, out.Reason
		if out.Reason != "" {
			row.ArchiveState = record.ArchiveReleased
		}
	}
	return row
}

// hashReaders bounds the stored logs of one job read back at once.
const hashReaders = 8

// hashedLogs are a job's stored logs as read back at its seal: the objects found, with the size and
// sha256 of their stored bytes, and why each of the others is unreadable.
type hashedLogs struct {
	objects    []archive.ObjectEntry
	unreadable []string
}

// unreadableReason says which stored logs could not be read back ("" if none), naming a few.
func (h hashedLogs) unreadableReason() string {
	if len(h.unreadable) == 0 {
		return ""
	}
	const named = 3
	reason := fmt.Sprintf("%d stored log(s) unreadable when sealed: %s", len(h.unreadable), strings.Join(h.unreadable[:min(named, len(h.unreadable))], "; "))
	if len(h.unreadable) > named {
		reason += fmt.Sprintf("; and %d more", len(h.unreadable)-named)
	}
	return reason
}

// hashLogs lists every stored log of the job with the size and sha256 of its stored bytes. A log
// the store checked at its write (record.LogObject.StoredSHA256: written whole, from memory, by a
// Put the store compared with that sha256 and would have refused otherwise) is listed as
// recorded, without a read: the capture compressed the very lines it hashed into those bytes, and
// a whole write has no stream index beside it. Every other stored log is read back, hashReaders at
// a time, in the order of logs (one after the other, a job of 1,000 pods waited for 1,000 reads
// before its release): what the store holds is hashed, and checked to decompress to what the
// log's record says. A log gone or not what its record says is unreadable (one that is there is
// listed, as it is); a failure to read is returned, to be tried again, unless s.GiveUp. A log's
// stream index (the node agent's, beside it: archive.StreamsSuffix) is listed after it, hashed as
// stored; a log without one (captured through pods/log) lists none.
//
// An object changed after its checked write is found by `audit verify`, which reads every object
// back; the read-back here never covered that either (it ran once, soon after the write).
func (s Sealer) hashLogs(ctx context.Context, logs []record.LogObject) (hashedLogs, error) {
	var stored []record.LogObject
	for _, l := range logs {
		if l.State == record.LogStored {
			stored = append(stored, l)
		}
	}
	objects := make([][]archive.ObjectEntry, len(stored))
	unreadable := make([]string, len(stored))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(hashReaders)
	for i, l := range stored {
		if l.StoredSHA256 != "" {
			objects[i] = []archive.ObjectEntry{{Key: l.ObjectKey, Bytes: l.StoredBytes, SHA256: l.StoredSHA256}}
			continue
		}
		g.Go(func() error {
			h, err := HashObject(gctx, s.Store, l.ObjectKey, true)
			switch {
			case errors.Is(err, objstore.ErrNotFound):
				unreadable[i] = l.ObjectKey + ": not in the store"
				return nil
			case err != nil && s.GiveUp:
				unreadable[i] = fmt.Sprintf("%s: %v", l.ObjectKey, err)
				return nil
			case err != nil:
				return fmt.Errorf("read back log %s: %w", l.ObjectKey, err)
			case h.ContentErr != nil:
				unreadable[i] = fmt.Sprintf("%s: does not decompress: %v", l.ObjectKey, h.ContentErr)
			case h.ContentBytes != l.Bytes || h.ContentSHA256 != l.SHA256:
				unreadable[i] = fmt.Sprintf("%s: holds %d bytes with sha256 %s, its record says %d bytes with %s", l.ObjectKey,
					h.ContentBytes, h.ContentSHA256, l.Bytes, l.SHA256)
			}
			objects[i] = append(objects[i], h.ObjectEntry)
			index, err := s.hashStreams(gctx, l.ObjectKey)
			switch {
			case err != nil && s.GiveUp:
				unreadable[i] = strings.TrimPrefix(unreadable[i]+"; ", "; ") + fmt.Sprintf("%s: %v", l.ObjectKey+archive.StreamsSuffix, err)
			case err != nil:
				return err
			case index != nil:
				objects[i] = append(objects[i], *index)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return hashedLogs{}, err
	}
	var out hashedLogs
	for i := range stored {
		out.objects = append(out.objects, objects[i]...)
		if unreadable[i] != "" {
			out.unreadable = append(out.unreadable, unreadable[i])
		}
	}
	return out, nil
}

// hashStreams hashes the stream index beside the stored log under key, as stored (nil: the log
// has none).
func (s Sealer) hashStreams(ctx context.Context, key string) (*archive.ObjectEntry, error) {
	h, err := HashObject(ctx, s.Store, key+archive.StreamsSuffix, false)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read back the stream index of log %s: %w", key, err)
	}
	return &h.ObjectEntry, nil
}

// segmentObject matches the name of a segment object (archive.Layout.Segment), the API
// capture's or the node agent's (the same key plus ".agent", pkg/agent: its upload may race the
// archiver's after a take-over, so it must not share the key).
var segmentObject = regexp.MustCompile(`^[^/]+\.run-[0-9]+\.seg-[0-9]{6,}\.gz(\.agent)?$`)

// sweepSegments deletes the segment objects left in the job's directory by its finished pods
// (archived or released: every log of theirs is recorded, and no capture of theirs writes any
// more), before the seal: a segment stored and then not recorded (the database down, the archiver
// killed between the two steps, or the run written whole after all) or recorded but not deleted
// is no part of the archive, and `audit verify` would call it tampering. Segments of pods still
// captured are theirs, and left alone.
func (s Sealer) sweepSegments(ctx context.Context, ref archive.JobRef, pods []record.Pod) error {
	done := map[string]bool{}
	for _, p := range pods {
		done[p.UID] = p.ArchiveState == record.ArchiveArchived || p.ArchiveState == record.ArchiveReleased
	}
	keys, err := s.keys(ref)
	if err != nil {
		return err
	}
	var left []string
	if err := s.Store.List(ctx, keys.dir+"/pods/", func(o objstore.ObjectInfo) error {
		if segmentObject.MatchString(path.Base(o.Key)) && done[path.Base(path.Dir(o.Key))] {
			left = append(left, o.Key)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("list the segments left of job %s: %w", ref.UID, err)
	}
	for _, key := range left {
		if err := s.Store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("delete segment %s left by a finished pod: %w", key, err)
		}
		metrics.SegmentsSweptTotal.Inc()
	}
	if len(left) > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted segments left in the store by finished pods", "jobUID", ref.UID, "segments", len(left))
	}
	return nil
}

// read returns the job's rows.
func (s Sealer) read(ctx context.Context, uid string) (Record, error) {
	var (
		rec Record
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
	h, err := HashObject(ctx, s.Store, key, false)
	return h.ObjectEntry, err
}

// putOnce stores b at key, checked by the store against b's checksum. Locked (retain not zero), an object is written once: when an earlier
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
	// Checked by the store, as the logs written whole are: the manifest lists job.json's sha256
	// as computed here, not read back.
	err = s.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{ContentType: "application/json", RetainUntil: retain, Checksum: objstore.ChecksumOf(b)})
	if errors.Is(err, objstore.ErrLocked) {
		return true, nil // stored and locked meanwhile by a concurrent pass
	}
	return false, err
}
