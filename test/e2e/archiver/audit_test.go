package archiver

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The real archiver, on the testbed, chains every job it finalizes (archived or released), signs
// the head with the key from --audit-signing-key, and `archiver audit verify` then finds the chain
// whole, and names a log changed by one byte behind its back (one the seal did not read back: the
// store checked it at its write).
func TestArchiverAuditChainVerifies(t *testing.T) {
	// Not parallel: it sets the environment (t.Setenv).
	private, public := stack.AuditKeys(t)
	s := stack.NewRig(t, objstore.BackendS3, "--audit-signing-key="+private, "--audit-digest-period=1s", "--cluster-name=testbed", "--log-deadline=3s")
	jobs := []*batchv1alpha1.Job{
		testbed.Job(s.NS, "two-workers").Task("worker", 2, []string{"main"}).Obj(),
		testbed.Job(s.NS, "one-ps").Task("ps", 1, []string{"main"}).Obj(),
		testbed.Job(s.NS, "nologs").Task("worker", 1, []string{"main"}).Obj(), // no logs: released after the deadline
	}
	stack.PodLogs(t, s.Env, s.NS, jobs[0].Name, map[string]int{"worker": 2}, []string{"main"}, false)
	stack.PodLogs(t, s.Env, s.NS, jobs[1].Name, map[string]int{"ps": 1}, []string{"main"}, false)
	for _, j := range jobs {
		stack.CreateAs(t, s.Env, "alice", j)
	}
	uids := map[string]bool{}
	for _, j := range jobs {
		got := s.WaitArchived(t, j, 2*time.Minute)
		uids[string(got.UID)] = true
	}
	ctx := t.Context()
	states := map[record.ArchiveState]int{}
	if err := s.Records.ChainEntries(ctx, "testbed", 1, 1<<62, func(e record.ChainEntry) error {
		if !uids[e.JobUID] {
			t.Errorf("chain entry seq %d is job %s, not one of this test's", e.Seq, e.JobUID)
		}
		j, err := s.Records.Job(ctx, e.JobUID)
		states[j.ArchiveState]++
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if states[record.ArchiveArchived] != 2 || states[record.ArchiveReleased] != 1 {
		t.Errorf("chained jobs by state %v, want 2 archived and 1 released", states)
	}
	// The signer signs every second: wait for a digest of the whole chain.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := s.Records.SignedDigests(ctx, "testbed")
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 && ds[len(ds)-1].Seq == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no signed digest of seq 3 within 30s (%d digests); archiver log: %s", len(ds), s.Proc.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}

	args := []string{"audit", "verify", "--cluster-name=testbed", "--audit-public-key=" + public}
	for _, a := range s.Archiver.Args {
		if strings.HasPrefix(a, "--store-") || strings.HasPrefix(a, "--db-dsn=") {
			args = append(args, a)
		}
	}
	for _, e := range s.Archiver.Environ {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, args, &out, &errOut); code != cli.ExitOK || !strings.Contains(out.String(), "OK: no finding") || !strings.Contains(out.String(), "3 entries") {
		t.Fatalf("audit verify: exit %d, want 0 with 3 entries\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}

	// One byte of one log, changed in the bucket.
	logs, err := s.Records.LogObjects(ctx, string(s.WaitArchived(t, jobs[0], time.Minute).UID))
	if err != nil || len(logs) == 0 {
		t.Fatalf("logs of %s: %d (%v)", jobs[0].Name, len(logs), err)
	}
	// Short logs: each was written whole by one PUT the store checked, and sealed with the sha256
	// the store accepted, not read back (docs/design/0009). verify reads it all the same.
	for _, l := range logs {
		if l.State == record.LogStored && l.StoredSHA256 == "" {
			t.Errorf("log %s sealed without the sha256 of a checked write: read back", l.ObjectKey)
		}
	}
	key := logs[0].ObjectKey
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	b[len(b)/2] ^= 0x20
	if err := s.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := cli.Main(ctx, args, &out, &errOut); code != cli.ExitFailed || !strings.Contains(out.String(), "altered: object "+key) {
		t.Fatalf("audit verify after a byte changed in %s: exit %d, want 1 naming it\nstdout:\n%s\nstderr:\n%s", key, code, out.String(), errOut.String())
	}
}
