// Package audit tests the audit chain (pkg/audit, db.FinalizeJob, audit.Sealer) against a real
// Postgres and MinIO, without a cluster; the real archiver's chain is verified end to end by
// test/e2e/archiver's TestArchiverAuditChainVerifies.
package audit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// Jobs finalized concurrently get the numbers 1..n without a gap, each once; a finalization whose
// transaction fails takes no number; repeating a finalization, also after a crash between the
// chain's commit and the manifest's upload, changes nothing; and the chain verifies.
func TestAuditChainGaplessAndIdempotent(t *testing.T) {
	t.Parallel()
	r := stack.NewChainRig(t)
	r.Build(t, 60, 8, 20)
	ctx := t.Context()

	// A seal that fails inside the locked section rolls the whole finalization back.
	ref := archive.JobRef{Namespace: "team-x", Name: "broken", UID: "broken-uid"}
	if err := r.Records.UpsertJob(ctx, record.Job{UID: ref.UID, Cluster: "eu-1", Namespace: ref.Namespace, Name: ref.Name, CreatedAt: stack.ChainStart}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Records.FinalizeJob(ctx, record.Finalization{Cluster: "eu-1", JobUID: ref.UID, ManifestKey: "k", RecordDigest: strings.Repeat("a", 64)},
		func(int64, string) ([]byte, error) { return nil, errors.New("boom") })
	if err == nil {
		t.Fatal("FinalizeJob with a failing seal succeeded")
	}
	if j, _ := r.Records.Job(ctx, ref.UID); j.ArchiveState != record.ArchivePending {
		t.Errorf("job %s after a failed finalization, want still pending", j.ArchiveState)
	}
	r.Build(t, 40, 8, 0)

	seen := map[string]bool{}
	var want int64 = 1
	if err := r.Records.ChainEntries(ctx, "eu-1", 1, 1<<62, func(e record.ChainEntry) error {
		if e.Seq != want {
			return fmt.Errorf("entry seq %d, want %d", e.Seq, want)
		}
		if seen[e.JobUID] {
			return fmt.Errorf("job %s chained twice", e.JobUID)
		}
		seen[e.JobUID] = true
		want++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 100 {
		t.Fatalf("%d jobs chained, want 100", len(seen))
	}
	head, err := r.Records.ChainHead(ctx, "eu-1")
	if err != nil || head.Seq != 100 {
		t.Fatalf("head %+v (%v), want seq 100", head, err)
	}

	// Repeated finalizations, concurrently, and one after its manifest was lost (a crash after
	// the commit): same entry, the manifest stored again byte for byte, nothing else changes.
	victim := r.Refs[10]
	entry, _, _ := r.Records.ChainEntry(ctx, victim.UID)
	if err := r.Store.Delete(ctx, entry.ManifestKey); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sealed, err := r.Sealer.Seal(ctx, victim, map[string]any{"changed": true}, "", time.Now())
			if err != nil || sealed.Entry.Seq != entry.Seq || !bytes.Equal(sealed.Entry.Manifest, entry.Manifest) {
				t.Errorf("repeated Seal: seq %d (%v), want seq %d with the same manifest", sealed.Entry.Seq, err, entry.Seq)
			}
		}()
	}
	wg.Wait()
	if head, _ := r.Records.ChainHead(ctx, "eu-1"); head.Seq != 100 {
		t.Errorf("head at %d after repeated finalizations, want 100", head.Seq)
	}
	rep := r.Verify(t)
	if !rep.OK() || rep.Entries != 100 || rep.Digests != 3 {
		t.Fatalf("verify of an untouched chain (want 100 entries, 3 digests, no finding):\n%s", stack.ReportText(t, rep))
	}
}

// The chain and its digests are append-only: UPDATE, DELETE and TRUNCATE are refused, and a
// finalized job's record cannot be rewritten by an upsert.
func TestAuditAppendOnly(t *testing.T) {
	t.Parallel()
	r := stack.NewChainRig(t)
	r.Build(t, 3, 1, 3)
	c := r.Superuser(t)
	if _, err := c.Exec(`SET session_replication_role = origin`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE audit_chain SET record_digest = repeat('0', 64)`, `DELETE FROM audit_chain WHERE seq = 2`,
		`TRUNCATE audit_chain`, `UPDATE audit_digests SET seq = 0`, `DELETE FROM audit_digests`, `TRUNCATE audit_digests`} {
		if _, err := c.Exec(q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", q, err)
		}
	}
	j, err := r.Records.Job(t.Context(), r.Refs[0].UID)
	if err != nil {
		t.Fatal(err)
	}
	changed := j
	changed.Phase, changed.Status, changed.Annotations = "Running", []byte(`{"state": {"phase": "Running"}}`), map[string]string{"note": "later"}
	if err := r.Records.UpsertJob(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Records.Job(t.Context(), j.UID); got.Phase != j.Phase || string(got.Status) != string(j.Status) || got.Annotations["note"] != "later" {
		t.Errorf("finalized job after upsert: phase %s, status %s, annotations %v; want phase and status kept, annotations updated", got.Phase, got.Status, got.Annotations)
	}
	if rep := r.Verify(t); !rep.OK() {
		t.Errorf("verify after refused changes: %v", rep.Findings)
	}
}

// Random tamperings of every kind on a chain of finalized jobs are each detected and named, and
// verify names nothing else. The full proof (1,000 tamperings in 3,000 jobs) is
// BenchmarkAuditVerify (test/performance, make bench-audit).
func TestAuditTamperingsDetected(t *testing.T) {
	t.Parallel()
	r := stack.NewChainRig(t)
	r.Build(t, 200, 8, 50)
	tp := stack.NewTamperer(t, r, 14)
	tms := tp.Inject(t, 60)
	rep := r.Verify(t)
	detected := stack.CheckDetected(t, rep, tms)
	t.Logf("%d/%d tamperings detected (%s); %d findings; verify of %d entries took %s", detected, len(tms), stack.CountKinds(tms), len(rep.Findings), rep.Entries, rep.Duration)
	if detected != len(tms) {
		t.Logf("report:\n%s", stack.ReportText(t, rep))
	}
}

// A verify of part of the chain checks only that part, and the link into it.
func TestAuditVerifyRange(t *testing.T) {
	t.Parallel()
	r := stack.NewChainRig(t)
	r.Build(t, 30, 4, 0)
	entry, _, _ := r.Records.ChainEntry(t.Context(), r.Refs[3].UID) // some entry; flip its manifest
	if err := r.Store.Put(t.Context(), entry.ManifestKey, strings.NewReader("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(from, to int64, want int) {
		rep, err := verify.Chain(t.Context(), r.Records, r.Store, verify.ChainOptions{Cluster: "eu-1", Prefix: stack.ChainPrefix, From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != want || rep.SignaturesChecked {
			t.Errorf("verify %d..%d: %v (signatures checked %v), want %d finding(s)", from, to, rep.Findings, rep.SignaturesChecked, want)
		}
	}
	check(entry.Seq, entry.Seq, 1)
	if entry.Seq > 1 {
		check(1, entry.Seq-1, 0)
	}
	if entry.Seq < 30 {
		check(entry.Seq+1, 0, 0)
	}
}

// The signer chains its digests, and stores again a digest the bucket lost (a crash between the
// database and the bucket) before it signs the next.
func TestAuditSignerChainsAndRestores(t *testing.T) {
	t.Parallel()
	r := stack.NewChainRig(t)
	r.Build(t, 5, 2, 0)
	r.Sign(t)
	ds, err := r.Records.SignedDigests(t.Context(), "eu-1")
	if err != nil || len(ds) != 1 || ds[0].Seq != 5 {
		t.Fatalf("digests %+v (%v), want one of seq 5", ds, err)
	}
	if err := r.Store.Delete(t.Context(), ds[0].ObjectKey); err != nil {
		t.Fatal(err)
	}
	if rep := r.Verify(t); len(rep.Findings) != 1 || rep.Findings[0].Kind != verify.Missing || rep.Findings[0].Item != "digest "+ds[0].ObjectKey {
		t.Errorf("verify with the digest object deleted: %v, want it missing", rep.Findings)
	}
	r.Build(t, 2, 1, 0)
	r.Sign(t)
	ds, _ = r.Records.SignedDigests(t.Context(), "eu-1")
	if len(ds) != 2 || ds[1].PrevDigest != ds[0].DigestSHA256 || ds[1].Seq != 7 {
		t.Fatalf("digests %+v, want a second of seq 7 chained to the first", ds)
	}
	if rep := r.Verify(t); !rep.OK() || rep.Digests != 2 {
		t.Errorf("verify after the signer restored the lost digest: %v (%d digests)", rep.Findings, rep.Digests)
	}
}
