package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/retention"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
)

// retentionPeriod is the --retention of TestAuditRetentionPrune.
const retentionPeriod = 30 * 24 * time.Hour

// TestAuditRetentionPrune proves retention on Postgres and the fs store with read-only locks, through
// the Sealer (the archiver's finalization) and the Pruner with a fake clock: each job's
// retain-until date is recorded and equals its objects' lock; nothing is deleted before it; a
// job's legal hold and a namespace's hold keep their data; the rest is deleted, rows and objects;
// audit verify passes after the prune and names the pruned jobs; tampering after the prune is
// still found.
func TestAuditRetentionPrune(t *testing.T) {
	r := stack.NewChainRig(t)
	root := t.TempDir()
	fsStore, err := objstore.NewFS(root, objstore.WithReadOnlyLocks())
	if err != nil {
		t.Fatal(err)
	}
	r.Store, r.Sealer.Store, r.Signer.Store = fsStore, fsStore, fsStore
	r.Sealer.RetainUntil = func(at time.Time) time.Time { return at.Add(retentionPeriod) }
	r.Build(t, 6, 2, 0)
	r.Sign(t)
	ctx := t.Context()

	// Job 1 gets a legal hold by annotation (as the archiver's upsert of the VcJob would record
	// it); job 2's namespace (team-2) is held, job 3's (team-3) says "false".
	held, nsHeld := r.Refs[1], r.Refs[2]
	j, err := r.Records.Job(ctx, held.UID)
	if err != nil {
		t.Fatal(err)
	}
	j.Annotations = map[string]string{tracking.LegalHoldAnnotation: "case 2026-117"}
	if err := r.Records.UpsertJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	pruner := &retention.Pruner{Records: r.Records, Store: fsStore, Cluster: "eu-1", Batch: 2, Policy: "--retention 720h0m0s", Clock: r.Clock,
		NamespaceHolds: func(ctx context.Context) (map[string]string, error) {
			// The database decides what the values mean: team-3's "false" holds nothing.
			return map[string]string{nsHeld.Namespace: "case 2026-118", r.Refs[3].Namespace: "false"}, nil
		}}

	// The recorded date is the lock's: the manifest file's modification time (fs lock date).
	c := r.Superuser(t)
	for _, ref := range r.Refs {
		var until time.Time
		var hold bool
		if err := c.QueryRow(`SELECT retain_until, legal_hold FROM jobs WHERE uid = $1`, ref.UID).Scan(&until, &hold); err != nil {
			t.Fatalf("job %s: retain_until: %v", ref.UID, err)
		}
		fi, err := os.Stat(filepath.Join(root, stack.Must(r.Sealer.Layout.Manifest(ref))))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(until) || fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("job %s: retain_until %s, its manifest is %s locked until %s", ref.UID, until, fi.Mode(), fi.ModTime())
		}
		if hold != (ref == held) {
			t.Errorf("job %s: legal_hold %v", ref.UID, hold)
		}
	}

	// A day before the first date: nothing goes, and the store refuses an early deletion.
	r.Clock.SetTime(stack.ChainStart.Add(retentionPeriod - 24*time.Hour))
	if n, err := pruner.PruneOnce(ctx); err != nil || n != 0 {
		t.Fatalf("prune before the retain-until dates: %d jobs, %v; want 0", n, err)
	}
	if err := fsStore.DeleteExpired(ctx, stack.Must(r.Sealer.Layout.Manifest(r.Refs[0])), r.Clock.Now()); !errors.Is(err, objstore.ErrLocked) {
		t.Errorf("DeleteExpired before the retain-until date: %v, want ErrLocked", err)
	}
	if rep := r.Verify(t); !rep.OK() || len(rep.Pruned) != 0 {
		t.Fatalf("verify before the prune: %d findings, %d pruned: %v", len(rep.Findings), len(rep.Pruned), rep.Findings)
	}

	// A day after every date: all but the held jobs go.
	r.Clock.SetTime(stack.ChainStart.Add(retentionPeriod + 24*time.Hour))
	n, err := pruner.PruneOnce(ctx)
	if err != nil || n != 4 {
		t.Fatalf("prune after the retain-until dates: %d jobs, %v; want 4", n, err)
	}
	var prunedUIDs []string
	for _, ref := range r.Refs {
		keep := ref == held || ref == nsHeld
		_, err := r.Records.Job(ctx, ref.UID)
		pods, perr := r.Records.Pods(ctx, ref.UID)
		if perr != nil {
			t.Fatal(perr)
		}
		_, serr := fsStore.Stat(ctx, stack.Must(r.Sealer.Layout.Manifest(ref)))
		logKey := stack.Must(r.Sealer.Layout.PodLog(ref, ref.Name+"-worker-0", ref.UID+"-pod0", "main", record.InstanceCurrent))
		_, lerr := fsStore.Stat(ctx, logKey)
		switch {
		case keep && (err != nil || len(pods) != 2 || serr != nil || lerr != nil):
			t.Errorf("held job %s lost data: job %v, %d pods, manifest %v, log %v", ref.UID, err, len(pods), serr, lerr)
		case !keep && (!errors.Is(err, db.ErrNotFound) || len(pods) != 0 || !errors.Is(serr, objstore.ErrNotFound) || !errors.Is(lerr, objstore.ErrNotFound)):
			t.Errorf("expired job %s not deleted: job %v, %d pods, manifest %v, log %v", ref.UID, err, len(pods), serr, lerr)
		}
		if !keep {
			prunedUIDs = append(prunedUIDs, ref.UID)
		}
	}
	if n, err := pruner.PruneOnce(ctx); err != nil || n != 0 {
		t.Errorf("second prune: %d jobs, %v; want 0", n, err)
	}

	rep := r.Verify(t)
	var got []string
	for _, p := range rep.Pruned {
		got = append(got, p.JobUID)
	}
	slices.Sort(got)
	slices.Sort(prunedUIDs)
	if !rep.OK() || !slices.Equal(got, prunedUIDs) {
		t.Fatalf("verify after the prune: findings %v, pruned %v, want none and %v", rep.Findings, got, prunedUIDs)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, uid := range prunedUIDs {
		if !strings.Contains(text.String(), " job "+uid+": retained until ") {
			t.Errorf("verify's text does not name pruned job %s:\n%s", uid, text.String())
		}
	}

	// Tampering after the prune: a held job's log changed, and a prune record deleted (its
	// deletion then has no record).
	logKey := filepath.Join(root, stack.Must(r.Sealer.Layout.PodLog(held, held.Name+"-worker-0", held.UID+"-pod0", "main", record.InstanceCurrent)))
	if err := os.Chmod(logKey, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logKey)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(logKey, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(`DELETE FROM audit_prunes WHERE job_uid = $1`, r.Refs[3].UID); err != nil {
		t.Fatal(err)
	}
	rep = r.Verify(t)
	found := map[string]bool{}
	for _, f := range rep.Findings {
		found[f.JobUID] = true
	}
	if !found[held.UID] || !found[r.Refs[3].UID] || len(rep.Pruned) != 3 {
		t.Errorf("tampering after the prune: findings %v, %d pruned; want findings on jobs %s and %s, 3 pruned", rep.Findings, len(rep.Pruned), held.UID, r.Refs[3].UID)
	}
}
