package db

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// Issue 23, item 11: a segment recorded again with the same contents (a flush retried after its
// commit's reply was lost) succeeds; one recorded again under the same number with other contents
// (a retry that took more lines) fails with db.ErrSegmentConflict, which is an ErrConflict, and
// changes nothing: the recorded row is what the capture must resume from.
func TestDBPutSegmentIdempotentOrConflict(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	mustUpsertJob(t, records, newJob("j1").build())
	if err := records.UpsertPod(ctx, newPod("p1", "j1")); err != nil {
		t.Fatal(err)
	}
	seg := record.Segment{PodUID: "p1", Container: "main", Run: 0, Seq: 0, ObjectKey: "seg/0", StoredBytes: 10, Bytes: 100,
		TotalBytes: 100, LastTime: at(time.Second), LastTimeLines: 1, HashState: []byte{1, 2, 3}}
	if err := records.PutSegment(ctx, seg); err != nil {
		t.Fatalf("PutSegment: %v", err)
	}
	if err := records.PutSegment(ctx, seg); err != nil {
		t.Errorf("PutSegment of the same segment again: %v, want success", err)
	}
	bigger := seg
	bigger.StoredBytes, bigger.Bytes, bigger.TotalBytes, bigger.LastTime, bigger.HashState = 20, 200, 200, at(2*time.Second), []byte{4, 5, 6}
	err := records.PutSegment(ctx, bigger)
	if !errors.Is(err, db.ErrSegmentConflict) || !errors.Is(err, db.ErrConflict) {
		t.Errorf("PutSegment of another segment under the same number: %v, want ErrSegmentConflict (an ErrConflict)", err)
	}
	segs, err := records.Segments(ctx, "p1", "main", 0)
	if err != nil || len(segs) != 1 || segs[0].Bytes != 100 || string(segs[0].HashState) != string(seg.HashState) {
		t.Errorf("segments %+v (%v), want the first one unchanged", segs, err)
	}
}

// Issue 23, item 11: two gaps of one run starting at the same time (a rotation seen, then the
// deadline passing on the rest) are both recorded; the same gap written twice is recorded once.
func TestDBGapsAtTheSameTime(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	mustUpsertJob(t, records, newJob("j1").build())
	if err := records.UpsertPod(ctx, newPod("p1", "j1")); err != nil {
		t.Fatal(err)
	}
	first := record.Gap{PodUID: "p1", Container: "main", Run: 0, After: at(time.Second), Before: at(2 * time.Second), Reason: record.GapRotated}
	second := record.Gap{PodUID: "p1", Container: "main", Run: 0, After: at(time.Second), Reason: record.GapUnreadable, Detail: "deadline of 1s passed"}
	for _, g := range []record.Gap{first, second, first, second} {
		if err := records.PutGap(ctx, g); err != nil {
			t.Fatalf("PutGap(%+v): %v", g, err)
		}
	}
	gaps, err := records.Gaps(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, g := range gaps {
		reasons = append(reasons, string(g.Reason))
	}
	if want := string(first.Reason) + "," + string(second.Reason); strings.Join(reasons, ",") != want {
		t.Errorf("gaps recorded: %q, want %q", strings.Join(reasons, ","), want)
	}
}

// Issue 23, item 7: a job whose annotation value, spec and status hold U+0000 (which jsonb refuses)
// is recorded, and reads back exactly; a repeated upsert changes nothing. A value the database
// cannot hold at all (U+0000 in a text column: the queue) fails with ErrInvalid, permanently.
func TestDBJobWithNUL(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	j := newJob("nul").build()
	j.Annotations = map[string]string{"note": "before\x00after", "plain": "\\u0000 is six characters"}
	j.Spec = []byte(`{"tasks": [{"template": {"spec": {"containers": [{"args": ["--sep=\u0000", "\\u0000"]}]}}}]}`)
	j.Status = []byte(`{"state": {"message": "a\u0000b", "phase": "Pending"}}`)
	mustUpsertJob(t, records, j)
	mustUpsertJob(t, records, j)
	got := mustJob(t, records, "nul")
	if diff := cmp.Diff(j.Annotations, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	for name, pair := range map[string][2][]byte{"spec": {j.Spec, got.Spec}, "status": {j.Status, got.Status}} {
		var want, have any
		if err := json.Unmarshal(pair[0], &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(pair[1], &have); err != nil {
			t.Fatalf("%s reads back as %q: %v", name, pair[1], err)
		}
		if diff := cmp.Diff(want, have); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	bad := newJob("nul-queue").build()
	bad.Queue = "de\x00fault"
	if err := records.UpsertJob(ctx, bad); !errors.Is(err, db.ErrInvalid) {
		t.Errorf("UpsertJob with U+0000 in the queue: %v, want ErrInvalid", err)
	}
}

// Issue 23, review of item 11: migration 0011's down step would delete the gaps that share a
// start with another of their run, since the old key cannot hold them. Rows of a finalized job
// are sealed: deleting one would make `audit verify` flag the job. So the step refuses, with an
// error saying why, while a finalized job has such gaps; those of jobs not finalized yet it
// deletes as before (their seal has not digested them).
func TestDBGapKeyDownStepKeepsSealedRows(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		t.Run(fmt.Sprintf("finalized=%t", sealed), func(t *testing.T) {
			ctx := t.Context()
			records, c := openAt(t, db.LatestVersion)
			mustUpsertJob(t, records, newJob("j").phase("Completed").build())
			if err := records.UpsertPod(ctx, newPod("p", "j")); err != nil {
				t.Fatal(err)
			}
			for _, g := range []record.Gap{
				{PodUID: "p", Container: "main", After: at(time.Second), Before: at(2 * time.Second), Reason: record.GapRotated},
				{PodUID: "p", Container: "main", After: at(time.Second), Reason: record.GapUnreadable},
			} {
				if err := records.PutGap(ctx, g); err != nil {
					t.Fatal(err)
				}
			}
			if sealed {
				if _, err := records.FinalizeJob(ctx, record.Finalization{Cluster: "c", JobUID: "j", Location: "s3://b/p/", ArchivedAt: at(time.Hour),
					ManifestKey: "p/manifest.json", RecordDigest: strings.Repeat("a", 64)}, func(int64, string) ([]byte, error) { return []byte("{}"), nil }); err != nil {
					t.Fatal(err)
				}
			}
			err := records.MigrateTo(ctx, versionBefore(t, 11))
			n := queryInt(t, c, `SELECT count(*) FROM log_gaps WHERE pod_uid = 'p'`)
			switch {
			case sealed && (err == nil || !strings.Contains(err.Error(), "finalized")):
				t.Errorf("migrating below 0011 with a finalized job's gaps sharing a start: %v, want a refusal that says why", err)
			case sealed && n != 2:
				t.Errorf("the finalized job has %d gaps after the refused down step, want its 2", n)
			case !sealed && err != nil:
				t.Errorf("migrating below 0011 with no finalized job's gap to delete: %v", err)
			case !sealed && n != 1:
				t.Errorf("the job has %d gaps after the down step, want 1 (the first recorded)", n)
			}
		})
	}
}

// Issue 23, the seal and a capture still running: once a job is finalized its record is sealed,
// and a capture's late write for one of its pods (a segment, a gap, a log object) is refused by the
// statement itself with db.ErrFinalized, adding nothing (before: accepted, and audit verify then
// reported the sealed job altered). A job still open takes them as before.
func TestDBNoCaptureWriteIntoAFinalizedJob(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	for _, j := range []string{"sealed", "open"} {
		mustUpsertJob(t, records, newJob(j).phase("Completed").build())
		if err := records.UpsertPod(ctx, newPod(j+"-p", j)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := records.FinalizeJob(ctx, record.Finalization{Cluster: "c", JobUID: "sealed", Location: "s3://b/p/", ArchivedAt: at(time.Hour),
		ManifestKey: "p/manifest.json", RecordDigest: strings.Repeat("a", 64)}, func(int64, string) ([]byte, error) { return []byte("{}"), nil }); err != nil {
		t.Fatal(err)
	}
	writes := func(pod string) map[string]func() error {
		return map[string]func() error{
			"segment": func() error {
				return records.PutSegment(ctx, record.Segment{PodUID: pod, Container: "main", ObjectKey: "seg/0", StoredBytes: 10, Bytes: 100,
					TotalBytes: 100, LastTime: at(time.Second), LastTimeLines: 1, HashState: []byte{1}})
			},
			"gap": func() error {
				return records.PutGap(ctx, record.Gap{PodUID: pod, Container: "main", After: at(time.Second), Reason: record.GapRotated})
			},
			"log object": func() error {
				return records.PutLogObject(ctx, record.LogObject{PodUID: pod, Container: "main", ContainerType: record.ContainerRegular,
					Instance: record.InstanceCurrent, State: record.LogUnavailable, Reason: "late"})
			},
		}
	}
	for what, write := range writes("sealed-p") {
		if err := write(); !errors.Is(err, db.ErrFinalized) {
			t.Errorf("a %s of a finalized job's pod: %v, want db.ErrFinalized", what, err)
		}
	}
	if g, err := records.Gaps(ctx, "sealed"); err != nil || len(g) != 0 {
		t.Errorf("the finalized job's gaps: %+v (%v), want none", g, err)
	}
	if l, err := records.LogObjects(ctx, "sealed"); err != nil || len(l) != 0 {
		t.Errorf("the finalized job's log objects: %+v (%v), want none", l, err)
	}
	if s, err := records.Segments(ctx, "sealed-p", "main", 0); err != nil || len(s) != 0 {
		t.Errorf("the finalized job's segments: %+v (%v), want none", s, err)
	}
	for what, write := range writes("open-p") {
		if err := write(); err != nil {
			t.Errorf("a %s of an open job's pod: %v", what, err)
		}
	}
}
