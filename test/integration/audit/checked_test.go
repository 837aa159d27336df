package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 28, target 2: one store write per short log, with no read-back. A log written whole by
// the capture is checked by the store as it receives it (objstore.PutOptions.Checksum), its row
// records the sha256 the store accepted, and the seal lists that without reading the object
// back. What no checked write stands behind (a log composed from segments, a write that found
// the object locked by a pass that crashed before recording it) is read back as before, and
// `audit verify` still reads everything.

// checkedBackends open an empty store on each backend: MinIO, the GCS emulator, the filesystem.
var checkedBackends = map[string]func(t *testing.T, lockMode string) objstore.Store{
	"S3": func(t *testing.T, lockMode string) objstore.Store {
		m := testbed.MinIO(t)
		return openStore(t, objstore.Config{Backend: objstore.BackendS3, LockMode: lockMode,
			S3: objstore.S3Config{Endpoint: m.Endpoint, Bucket: m.Bucket, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true}})
	},
	"GCS": func(t *testing.T, lockMode string) objstore.Store {
		g := testbed.GCS(t)
		t.Setenv("STORAGE_EMULATOR_HOST", g.Host)
		return openStore(t, objstore.Config{Backend: objstore.BackendGCS, LockMode: lockMode, GCS: objstore.GCSConfig{Bucket: g.Bucket}})
	},
	"fs": func(t *testing.T, lockMode string) objstore.Store {
		return openStore(t, objstore.Config{Backend: objstore.BackendFS, LockMode: lockMode, FSRoot: t.TempDir()})
	},
}

func openStore(t *testing.T, cfg objstore.Config) objstore.Store {
	t.Helper()
	s, err := objstore.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return s
}

// TestSealTrustsTheStoresCheckOfAShortLog: a short log costs the store one PUT, checked, and no
// GET: not at its capture, not at its seal. The manifest lists the sha256 of the bytes the store
// holds. `audit verify` reads every log back, and finds an object changed after the seal.
func TestSealTrustsTheStoresCheckOfAShortLog(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(checkedBackends)) {
		t.Run(name, func(t *testing.T) {
			store := newCountingStore(checkedBackends[name](t, ""))
			r := newCheckedRig(t, store)
			r.WriteLog = func(ctx context.Context, ref archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error) {
				return captureLog(ctx, r, store, capture.DefaultConfig, ref, pod, key, content)
			}
			_, calls, logs, m := sealJob(t, r, store)
			for _, l := range logs {
				log, streams := calls.of(l.ObjectKey), calls.of(l.ObjectKey+archive.StreamsSuffix)
				t.Logf("short log %s, captured and sealed: %d PUT, %d GET, %d other store calls (its stream index: %d)",
					l.ObjectKey, log["PUT"], log["GET"], total(log)-log["PUT"]-log["GET"], total(streams))
				if want := map[string]int{"PUT": 1}; !maps.Equal(log, want) || len(streams) != 0 {
					t.Errorf("store calls on log %s %v and on its stream index %v, want %v and none", l.ObjectKey, log, streams, want)
				}
				stored := storedSHA256(t, store.Store, l.ObjectKey)
				if l.StoredSHA256 != stored {
					t.Errorf("log %s recorded with stored sha256 %q, the store holds %s", l.ObjectKey, l.StoredSHA256, stored)
				}
				if o, ok := m[l.ObjectKey]; !ok || o.SHA256 != stored || o.Bytes != l.StoredBytes {
					t.Errorf("manifest lists log %s as %+v (listed: %v), want %d bytes with sha256 %s", l.ObjectKey, o, ok, l.StoredBytes, stored)
				}
			}
			t.Logf("store calls of the whole job, captured and sealed: %v", calls.ops())

			// audit verify reads every log back: nothing to find, then the changed object.
			if rep := verifyChain(t, r); len(rep.Findings) != 0 {
				t.Fatalf("verify found %v on an untouched archive", rep.Findings)
			}
			verified := store.take()
			for _, l := range logs {
				if verified.of(l.ObjectKey)["GET"] == 0 {
					t.Errorf("audit verify did not read log %s back: %v", l.ObjectKey, verified.of(l.ObjectKey))
				}
			}
			changed := logs[0].ObjectKey
			stack.Put(t, store.Store, changed, stack.GzipBytes(t, []byte("not what was captured\n")))
			rep := verifyChain(t, r)
			if !slices.ContainsFunc(rep.Findings, func(f verify.Finding) bool { return strings.Contains(f.String(), changed) }) {
				t.Errorf("verify after the log %s was changed found %v, want it named", changed, rep.Findings)
			}
		})
	}
}

// TestCheckedWriteRefusesOtherBytes: a log, or the job's final object (job.json, written by the
// seal), whose bytes change on their way to the store (here in a wrapper between jobvault and the
// backend, as a broken proxy or disk would) is refused by the store, with objstore.ErrChecksum,
// nothing is stored under its key, and nothing is recorded for it: the job is not sealed.
func TestCheckedWriteRefusesOtherBytes(t *testing.T) {
	for _, object := range []string{"log", "job.json"} {
		for _, name := range slices.Sorted(maps.Keys(checkedBackends)) {
			t.Run(object+"/"+name, func(t *testing.T) {
				store := checkedBackends[name](t, "")
				r := newCheckedRig(t, store)
				var keys []string
				logStore := objstore.Store(store)
				if object == "log" {
					logStore = corruptingStore{store}
				} else {
					r.Sealer.Store = corruptingStore{store}
				}
				r.WriteLog = func(ctx context.Context, ref archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error) {
					if object == "log" {
						keys = append(keys, key)
					} else if len(keys) == 0 {
						keys = append(keys, stack.Must(r.Sealer.Layout.JobObject(ref)))
					}
					return captureLog(ctx, r, logStore, capture.DefaultConfig, ref, pod, key, content)
				}
				ref, err := r.AddJob(t.Context(), 1)
				if !errors.Is(err, objstore.ErrChecksum) {
					t.Fatalf("capture and seal of a %s changed on its way: error = %v, want ErrChecksum", object, err)
				}
				t.Logf("refused: %v", err)
				for _, key := range keys {
					if _, err := store.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
						t.Errorf("Stat(%s) after the refused write: error = %v, want ErrNotFound", key, err)
					}
				}
				logs, err := r.Records.LogObjects(t.Context(), ref.UID)
				if err != nil || (object == "log") != (len(logs) == 0) {
					t.Errorf("log rows %v (%v) after the refused write of a %s", logs, err, object)
				}
				if _, chained, err := r.Records.ChainEntry(t.Context(), ref.UID); err != nil || chained {
					t.Errorf("job chained: %v (%v), want not sealed", chained, err)
				}
			})
		}
	}
}

// TestSealReadsBackWhatNoCheckedWriteStandsBehind: a log composed from segments, and one whose
// whole write found the object locked by an earlier pass that crashed before recording it (the
// store checked none of this pass's bytes), are recorded without a stored sha256, and the seal
// reads them back, as it always did. The write once (capture's putWhole) read the locked object
// too, to find it holds the same log; one holding another is TestWriteLeavesAnotherLockedLog.
func TestSealReadsBackWhatNoCheckedWriteStandsBehind(t *testing.T) {
	segmented := capture.DefaultConfig
	segmented.SegmentBytes = 256
	for _, tc := range []struct {
		name     string
		backend  string
		lockMode string
		cfg      capture.Config
		// earlier: an earlier pass stored the same log, locked, under its key.
		earlier bool
		reads   int // of each log: the seal's, and the write's of an object found there
	}{
		{"composed from segments/S3", "S3", "", segmented, false, 1},
		{"composed from segments/GCS", "GCS", "", segmented, false, 1},
		{"composed from segments/fs", "fs", "", segmented, false, 1},
		{"found locked after a crash/fs", "fs", objstore.LockGovernance, capture.DefaultConfig, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newCountingStore(checkedBackends[tc.backend](t, tc.lockMode))
			r := newCheckedRig(t, store)
			if tc.lockMode != "" {
				r.Sealer.RetainUntil = func(at time.Time) time.Time { return at.Add(24 * time.Hour) }
			}
			r.WriteLog = func(ctx context.Context, ref archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error) {
				if tc.earlier {
					if err := store.Store.Put(ctx, key, bytes.NewReader(stack.GzipBytes(t, []byte(content))),
						objstore.PutOptions{RetainUntil: r.Sealer.RetainUntil(time.Now())}); err != nil {
						return record.LogObject{}, err
					}
				}
				return captureLog(ctx, r, store, tc.cfg, ref, pod, key, content)
			}
			ref, calls, logs, m := sealJob(t, r, store)
			for _, l := range logs {
				log := calls.of(l.ObjectKey)
				t.Logf("log %s, captured and sealed: %v", l.ObjectKey, log)
				if l.StoredSHA256 != "" || log["GET"] != tc.reads {
					t.Errorf("log %s recorded with stored sha256 %q and read %d times, want none and read %d", l.ObjectKey, l.StoredSHA256, log["GET"], tc.reads)
				}
				if stored := storedSHA256(t, store.Store, l.ObjectKey); m[l.ObjectKey].SHA256 != stored {
					t.Errorf("manifest lists log %s with sha256 %s, the store holds %s", l.ObjectKey, m[l.ObjectKey].SHA256, stored)
				}
			}
			job, err := r.Records.Job(t.Context(), ref.UID)
			if err != nil {
				t.Fatal(err)
			}
			if rep := verifyChain(t, r); job.ArchiveState != record.ArchiveArchived || len(rep.Findings) != 0 {
				t.Errorf("job %s %q, verify found %v; want archived and nothing found", job.ArchiveState, job.ReleaseReason, rep.Findings)
			}
		})
	}
}

// TestWriteLeavesAnotherLockedLog: a log's whole write that finds its key holding another log,
// locked (what a run named for another run's instance would find), fails with a
// capture.ConflictError and leaves that log as it is. Before a final log was written once, the
// write took the locked object for this pass's own and recorded the log; only the seal's read
// back found the other bytes, and released the job.
func TestWriteLeavesAnotherLockedLog(t *testing.T) {
	store := newCountingStore(checkedBackends["fs"](t, objstore.LockGovernance))
	r := newCheckedRig(t, store)
	r.Sealer.RetainUntil = func(at time.Time) time.Time { return at.Add(24 * time.Hour) }
	other := stack.GzipBytes(t, []byte("another run's line\n"))
	var conflict *capture.ConflictError
	r.WriteLog = func(ctx context.Context, ref archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error) {
		if err := store.Store.Put(ctx, key, bytes.NewReader(other), objstore.PutOptions{RetainUntil: r.Sealer.RetainUntil(time.Now())}); err != nil {
			return record.LogObject{}, err
		}
		l, err := captureLog(ctx, r, store, capture.DefaultConfig, ref, pod, key, content)
		if !errors.As(err, &conflict) {
			t.Errorf("write over another locked log: %v, want a capture.ConflictError", err)
		}
		if got := stack.Must(io.ReadAll(stack.Must(store.Store.Get(ctx, key)))); !bytes.Equal(got, other) {
			t.Errorf("the locked log under %s was replaced", key)
		}
		return l, err
	}
	if _, err := r.AddJob(t.Context(), 1); !errors.As(err, &conflict) {
		t.Errorf("job added: %v, want the write's conflict", err)
	}
}

// newCheckedRig is a stack.ChainRig on a fresh database and store.
func newCheckedRig(t *testing.T, store objstore.Store) *stack.ChainRig {
	t.Helper()
	records, dsn := stack.OpenRecords(t)
	return &stack.ChainRig{Records: records, DSN: dsn, Store: store,
		Sealer: audit.Sealer{Records: records, Store: store, Layout: archive.Layout{Prefix: stack.ChainPrefix}, Cluster: "eu-1"}}
}

// captureLog captures a pod's ended log, content, through store as pkg/archiver's capture does
// (capture.Capture, then capture.Assemble when it was stored in segments), and returns the row
// the archiver records for it (capture.Assembled.Stored).
func captureLog(ctx context.Context, r *stack.ChainRig, store objstore.Store, cfg capture.Config, ref archive.JobRef,
	pod record.Pod, key, content string) (record.LogObject, error) {
	cref := capture.Ref{Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID, Container: "main"}
	segKey := func(seq int32) string {
		return stack.Must(r.Sealer.Layout.Segment(ref, pod.Name, pod.UID, "main", 0, seq))
	}
	over := func(context.Context) (capture.End, error) { return capture.End{Over: true, Final: true}, nil }
	final := func(bool) (string, time.Time) {
		if r.Sealer.RetainUntil == nil {
			return key, time.Time{}
		}
		return key, r.Sealer.RetainUntil(time.Now())
	}
	src := lineSource{at: stack.ChainStart, content: content}
	cfg.NodeLogMaxSize = 0 // the log is all there: no rotation to suspect
	a, err := capture.Capture(ctx, cfg, src, r.Records, store, segKey, cref, over, final)
	if err != nil {
		return record.LogObject{}, err
	}
	if a == nil {
		segs, err := r.Records.Segments(ctx, pod.UID, "main", 0)
		if err != nil {
			return record.LogObject{}, err
		}
		assembled, err := capture.Assemble(ctx, store, cref, key, segs, time.Time{})
		if err != nil {
			return record.LogObject{}, err
		}
		a = &assembled
	}
	return a.Stored(record.LogObject{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent}), nil
}

// lineSource serves content as pods/log does with timestamps=true: each line stamped, a
// millisecond apart from at.
type lineSource struct {
	at      time.Time
	content string
}

func (s lineSource) Open(context.Context, capture.Ref, capture.OpenOptions) (io.ReadCloser, error) {
	var b strings.Builder
	for i, line := range strings.SplitAfter(s.content, "\n") {
		if line != "" {
			fmt.Fprintf(&b, "%s %s", s.at.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), line)
		}
	}
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// sealJob records and seals a job through r (stack.ChainRig.AddJob) and returns it with the store calls
// counted, its log rows and the objects its manifest lists.
func sealJob(t *testing.T, r *stack.ChainRig, store *countingStore) (archive.JobRef, storeCalls, []record.LogObject, map[string]archive.ObjectEntry) {
	t.Helper()
	ref, err := r.AddJob(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	calls := store.take()
	logs, err := r.Records.LogObjects(t.Context(), ref.UID)
	if err != nil || len(logs) != 2 {
		t.Fatalf("log rows %v (%v), want 2", logs, err)
	}
	return ref, calls, logs, sealedManifest(t, r, ref)
}

// sealedManifest returns the objects the job's chain entry lists, by key.
func sealedManifest(t *testing.T, r *stack.ChainRig, ref archive.JobRef) map[string]archive.ObjectEntry {
	t.Helper()
	e, chained, err := r.Records.ChainEntry(t.Context(), ref.UID)
	if err != nil || !chained {
		t.Fatalf("chain entry of job %s: %v (chained %v)", ref.UID, err, chained)
	}
	var m archive.Manifest
	if err := json.Unmarshal(e.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	objects := map[string]archive.ObjectEntry{}
	for _, o := range m.Objects {
		objects[o.Key] = o
	}
	return objects
}

// storedSHA256 reads the object at key and returns the sha256 of its stored bytes.
func storedSHA256(t *testing.T, store objstore.Store, key string) string {
	t.Helper()
	h, err := audit.HashObject(t.Context(), store, key, false)
	if err != nil {
		t.Fatal(err)
	}
	return h.SHA256
}

func verifyChain(t *testing.T, r *stack.ChainRig) verify.ChainReport {
	t.Helper()
	rep, err := verify.Chain(t.Context(), r.Records, r.Store, verify.ChainOptions{Cluster: "eu-1", Prefix: stack.ChainPrefix})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

// countingStore counts the calls made through a store, by operation and key, and passes them on.
type countingStore struct {
	objstore.Store
	mu    sync.Mutex
	calls storeCalls
}

// storeCalls are calls counted: operation by key.
type storeCalls map[string]map[string]int

// of returns the calls made on key, by operation.
func (c storeCalls) of(key string) map[string]int {
	out := map[string]int{}
	for op, keys := range c {
		if n := keys[key]; n > 0 {
			out[op] = n
		}
	}
	return out
}

// ops returns the calls made, by operation.
func (c storeCalls) ops() map[string]int {
	out := map[string]int{}
	for op, keys := range c {
		out[op] = total(keys)
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func newCountingStore(s objstore.Store) *countingStore {
	return &countingStore{Store: s, calls: storeCalls{}}
}

func (c *countingStore) count(op, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls[op] == nil {
		c.calls[op] = map[string]int{}
	}
	c.calls[op][key]++
}

// take returns the calls counted since the last take.
func (c *countingStore) take() storeCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = storeCalls{}
	return calls
}

func (c *countingStore) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) error {
	c.count("PUT", key)
	return c.Store.Put(ctx, key, r, opts)
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.count("GET", key)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.count("STAT", key)
	return c.Store.Stat(ctx, key)
}

func (c *countingStore) Compose(ctx context.Context, dst string, srcs []string, opts objstore.PutOptions) error {
	c.count("COMPOSE", dst)
	return c.Store.Compose(ctx, dst, srcs, opts)
}

func (c *countingStore) Delete(ctx context.Context, key string) error {
	c.count("DELETE", key)
	return c.Store.Delete(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	c.count("LIST", prefix)
	return c.Store.List(ctx, prefix, fn)
}

// corruptingStore changes one bit of every object put through it, keeping the checksum given
// with it: the bytes the store receives are not the ones the capture hashed.
type corruptingStore struct{ objstore.Store }

func (c corruptingStore) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) > 0 {
		b[len(b)/2] ^= 0x01
	}
	return c.Store.Put(ctx, key, bytes.NewReader(b), opts)
}
