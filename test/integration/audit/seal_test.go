package audit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// lateRow records a row of the job (a gap of its first pod) just before the first finalization of
// the job starts, as a capture finishing late would: after the Sealer read the job's rows.
type lateRow struct {
	*db.DB
	gap  record.Gap
	once sync.Once
	err  error
}

func (l *lateRow) FinalizeJob(ctx context.Context, f record.Finalization, seal record.Seal) (record.Finalized, error) {
	l.once.Do(func() { l.err = l.DB.PutGap(ctx, l.gap) })
	if l.err != nil {
		return record.Finalized{}, l.err
	}
	return l.DB.FinalizeJob(ctx, f, seal)
}

// Issue 23, item 11: the seal digests exactly the rows it finalizes. A row added between the
// Sealer's read and the finalization is not left out of the sealed record (before: `audit verify`
// then reported it "extra"): the finalization sees that the rows changed and fails, and the next
// pass seals them all, the late gap included in the job's release reason.
func TestSealedRowsAreTheFinalizedRows(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	store, err := objstore.New(t.Context(), objstore.Config{Backend: objstore.BackendFS, FSRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ref := archive.JobRef{Namespace: "team-1", Name: "train-1", UID: "00000000-0000-4000-8000-000000000001"}
	late := &lateRow{DB: records, gap: record.Gap{PodUID: ref.UID + "-pod0", Container: "main", Run: 0,
		After: stack.ChainStart.Add(5 * time.Second), Reason: record.GapUnreadable, Detail: "recorded late"}}
	r := &stack.ChainRig{Records: records, DSN: dsn, Store: store,
		Sealer: audit.Sealer{Records: late, Store: store, Layout: archive.Layout{Prefix: stack.ChainPrefix}, Cluster: "eu-1"}}
	ref, err = r.AddJob(t.Context(), 1) // job 1: no gap of its own
	if err != nil {
		// The finalization saw the late row: the archiver retries, as its reconcile does.
		t.Logf("first seal: %v", err)
		sealAgain(t, r, ref)
	}
	chainVerified(t, r)
	row, err := records.Job(t.Context(), ref.UID)
	if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "1 gap(s)") {
		t.Errorf("job row %s %q (%v), want released for the late gap", row.ArchiveState, row.ReleaseReason, err)
	}
}

// A seal whose Settled check fails (the archiver's list of a job's pods outside its cache found
// and recorded some while the seal read) finalizes nothing; the next seal, from the record as it
// then is, does.
func TestSealStopsWhenNotSettled(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	store, err := objstore.New(t.Context(), objstore.Config{Backend: objstore.BackendFS, FSRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	unsettled := errors.New("pods recorded during the seal")
	r := &stack.ChainRig{Records: records, DSN: dsn, Store: store,
		Sealer: audit.Sealer{Records: records, Store: store, Layout: archive.Layout{Prefix: stack.ChainPrefix}, Cluster: "eu-1",
			Settled: func(context.Context) error { return unsettled }}}
	ref, err := r.AddJob(t.Context(), 1)
	if !errors.Is(err, unsettled) {
		t.Fatalf("seal with its check failing: %v, want %v", err, unsettled)
	}
	if row, err := records.Job(t.Context(), ref.UID); err != nil || row.ArchiveState != record.ArchivePending {
		t.Fatalf("job row %s (%v) after the stopped seal, want pending", row.ArchiveState, err)
	}
	r.Sealer.Settled = nil
	sealAgain(t, r, ref)
	chainVerified(t, r)
	if row, err := records.Job(t.Context(), ref.UID); err != nil || row.ArchiveState != record.ArchiveArchived {
		t.Errorf("job row %s (%v) after the second seal, want archived", row.ArchiveState, err)
	}
}

// sealAgain seals the job ref again, as the archiver's next pass does.
func sealAgain(t *testing.T, r *stack.ChainRig, ref archive.JobRef) {
	t.Helper()
	jobObject := map[string]any{"metadata": map[string]any{"namespace": ref.Namespace, "name": ref.Name, "uid": ref.UID}}
	if _, err := r.Sealer.Seal(t.Context(), ref, jobObject, "", stack.ChainStart.Add(time.Hour)); err != nil {
		t.Fatalf("second seal: %v", err)
	}
}

// chainVerified checks the rig's chain as audit verify does: no finding.
func chainVerified(t *testing.T, r *stack.ChainRig) {
	t.Helper()
	for _, f := range verifyChain(t, r).Findings {
		t.Errorf("verify: %s", f)
	}
}
