package stack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/testbed"
)

// ChainPrefix is the archive prefix of a ChainRig's chain, and ChainCluster the cluster of
// NewChainRig's.
const (
	ChainPrefix  = "archive"
	ChainCluster = "eu-1"
)

// ChainRig is a real Postgres and MinIO with jobs finalized into the audit chain through
// audit.Sealer, the code path of JobReconciler.finalize, without a cluster: for the chain's
// integration tests and its benchmarks.
type ChainRig struct {
	Records *db.DB
	DSN     string
	Store   objstore.Store
	// StoreArgs and StoreEnviron are the store as the archiver's flags (with --store-prefix) and
	// environment: what `archiver audit verify` needs beside the DSN.
	StoreArgs, StoreEnviron []string
	// Cluster is the chain's cluster (the archiver's --cluster-name).
	Cluster string
	Sealer  audit.Sealer
	Signer  *audit.Signer
	Clock   *testingclock.FakeClock
	Pub     ed25519.PublicKey
	// Refs are the jobs built, by index.
	Refs []archive.JobRef
	// AfterLog, when not nil, is called once each log of a job is recorded, before the job is
	// sealed: to add what a capture leaves beside it.
	AfterLog func(ctx context.Context, ref archive.JobRef, pod record.Pod, logKey string) error
	// WriteLog, when not nil, stores a pod's log with content under key and returns its row, as
	// the capture does; archive.Upload otherwise.
	WriteLog func(ctx context.Context, ref archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error)
	// first is the index of the rig's first job: jobs of rigs that share a database are numbered
	// apart, so their UIDs differ.
	first int
}

// ChainStart is the creation time of a ChainRig's first job, and its clock's start.
var ChainStart = time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)

// NewChainRig opens a migrated database and a MinIO bucket, with a Sealer and a Signer (a fresh
// key, a fake clock at ChainStart) of cluster ChainCluster; no job is finalized yet.
func NewChainRig(t testing.TB) *ChainRig {
	t.Helper()
	records, dsn := OpenRecords(t)
	s3, args, environ := MinIOStore(testbed.MinIO(t))
	store, err := objstore.New(t.Context(), objstore.Config{Backend: objstore.BackendS3, S3: s3})
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := &ChainRig{Records: records, DSN: dsn, Store: store, StoreArgs: append(args, "--store-prefix="+ChainPrefix), StoreEnviron: environ,
		Clock: testingclock.NewFakeClock(ChainStart), Pub: pub}
	return r.withCluster(ChainCluster, key)
}

// ForCluster is a rig of the same database, store, clock and key for the chain of another cluster,
// its jobs numbered after the n jobs r may hold.
func (r *ChainRig) ForCluster(cluster string, n int) *ChainRig {
	o := *r
	o.Refs, o.first = nil, r.first+max(n, len(r.Refs))
	return o.withCluster(cluster, r.Signer.Key)
}

// withCluster sets the rig's cluster, with its Sealer and a Signer with key.
func (r *ChainRig) withCluster(cluster string, key ed25519.PrivateKey) *ChainRig {
	r.Cluster = cluster
	r.Sealer = audit.Sealer{Records: r.Records, Store: r.Store, Layout: archive.Layout{Prefix: ChainPrefix}, Cluster: cluster}
	r.Signer = &audit.Signer{Records: r.Records, Store: r.Store, Prefix: ChainPrefix, Cluster: cluster, Key: key, Clock: r.Clock}
	return r
}

// Build records and finalizes n more jobs, workers at a time, signing the head every signEvery
// jobs (0: never).
func (r *ChainRig) Build(t testing.TB, n, workers, signEvery int) {
	t.Helper()
	start := len(r.Refs)
	r.Refs = append(r.Refs, make([]archive.JobRef, n)...)
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ref, err := r.AddJob(t.Context(), r.first+i)
				if err != nil {
					errs <- fmt.Errorf("job %d: %w", i, err)
					return
				}
				r.Refs[i] = ref
			}
		}()
	}
	for i := start; i < start+n; i++ {
		if signEvery > 0 && i > start && (i-start)%signEvery == 0 {
			r.Sign(t)
		}
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if signEvery > 0 {
		r.Sign(t)
	}
}

// Sign steps the clock an hour and signs the chain head.
func (r *ChainRig) Sign(t testing.TB) {
	t.Helper()
	r.Clock.Step(time.Hour)
	if _, err := r.Signer.SignOnce(t.Context()); err != nil {
		t.Fatalf("sign: %v", err)
	}
}

// AddJob records job i as the archiver would (row, transitions, two pods with a log each, every
// seventh with a gap) and finalizes it through the Sealer.
func (r *ChainRig) AddJob(ctx context.Context, i int) (archive.JobRef, error) {
	ref := archive.JobRef{Namespace: fmt.Sprintf("team-%d", i%5), Name: fmt.Sprintf("train-%d", i), UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i)}
	created := ChainStart.Add(time.Duration(i) * time.Second)
	done := created.Add(90 * time.Second)
	row := record.Job{UID: ref.UID, Cluster: r.Cluster, Namespace: ref.Namespace, Name: ref.Name, Queue: "default", Submitter: "alice@example.com",
		SubmitterGroups: []string{"team"}, CreatedAt: created, FinishedAt: &done, Phase: "Completed",
		Spec: []byte(`{"tasks": [{"name": "worker", "replicas": 2}]}`), Status: []byte(`{"state": {"phase": "Completed"}}`)}
	if err := r.Records.UpsertJob(ctx, row); err != nil {
		return ref, err
	}
	var ts []record.Transition
	for k, p := range []string{"Pending", "Running", "Completed"} {
		ts = append(ts, record.Transition{Phase: p, Time: created.Add(time.Duration(k) * 30 * time.Second), Reason: p + " reason", Source: record.SourceCondition, ObservedAt: done})
	}
	if _, err := r.Records.RecordTransitions(ctx, ref.UID, ts); err != nil {
		return ref, err
	}
	for p := range 2 {
		pod := record.Pod{UID: fmt.Sprintf("%s-pod%d", ref.UID, p), JobUID: ref.UID, Namespace: ref.Namespace, Name: fmt.Sprintf("%s-worker-%d", ref.Name, p),
			Task: "worker", Node: "node-1", Phase: "Succeeded", CreatedAt: created, StartedAt: &created, FinishedAt: &done}
		if err := r.Records.UpsertPod(ctx, pod); err != nil {
			return ref, err
		}
		key := Must(r.Sealer.Layout.PodLog(ref, pod.Name, pod.UID, "main", record.InstanceCurrent))
		content := strings.Repeat(fmt.Sprintf("%s line of pod %d of job %d\n", created.Format(time.RFC3339), p, i), 20+i%50)
		write := r.WriteLog
		if write == nil {
			write = r.upload
		}
		row, err := write(ctx, ref, pod, key, content)
		if err != nil {
			return ref, err
		}
		if err := r.Records.PutLogObject(ctx, row); err != nil {
			return ref, err
		}
		if r.AfterLog != nil {
			if err := r.AfterLog(ctx, ref, pod, key); err != nil {
				return ref, err
			}
		}
		if i%7 == 0 && p == 0 {
			if err := r.Records.PutGap(ctx, record.Gap{PodUID: pod.UID, Container: "main", Run: 0, After: created.Add(time.Second + 123), Reason: record.GapRotated}); err != nil {
				return ref, err
			}
		}
		if err := r.Records.MarkPodArchived(ctx, pod.UID, done, ""); err != nil {
			return ref, err
		}
	}
	jobObject := map[string]any{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
		"metadata": map[string]any{"namespace": ref.Namespace, "name": ref.Name, "uid": ref.UID}}
	_, err := r.Sealer.Seal(ctx, ref, jobObject, "", done.Add(time.Minute))
	return ref, err
}

// upload stores a pod's log with archive.Upload and returns its row.
func (r *ChainRig) upload(ctx context.Context, _ archive.JobRef, pod record.Pod, key, content string) (record.LogObject, error) {
	st, err := archive.Upload(ctx, r.Store, key, strings.NewReader(content))
	return record.LogObject{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular,
		Instance: record.InstanceCurrent, ObjectKey: key, Bytes: st.Bytes, StoredBytes: st.StoredBytes, SHA256: st.SHA256, State: record.LogStored}, err
}

// Verify runs verify.Chain over the whole chain with the public key.
func (r *ChainRig) Verify(t testing.TB) verify.ChainReport {
	t.Helper()
	rep, err := verify.Chain(t.Context(), r.Records, r.Store, verify.ChainOptions{Cluster: r.Cluster, Prefix: ChainPrefix, PublicKey: r.Pub})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

// Superuser opens the database as the superuser who bypasses every trigger, as an attacker or
// a careless administrator with that power would.
func (r *ChainRig) Superuser(t testing.TB) *sql.DB {
	t.Helper()
	c, err := sql.Open("postgres", r.DSN)
	if err != nil {
		t.Fatal(err)
	}
	c.SetMaxOpenConns(1)
	if _, err := c.Exec(`SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
