package archiver

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// segmentRecords are loggedRecords that also keep one run's segments and gaps, as the database does.
type segmentRecords struct {
	*loggedRecords
	gmu  sync.Mutex
	segs []record.Segment
	gaps []record.Gap
}

func (m *segmentRecords) Segments(context.Context, string, string, int32) ([]record.Segment, error) {
	return m.segs, nil
}

func (m *segmentRecords) PutGap(_ context.Context, g record.Gap) error {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	m.gaps = append(m.gaps, g)
	return nil
}

func (m *segmentRecords) Gaps(context.Context, string) ([]record.Gap, error) {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	return append([]record.Gap(nil), m.gaps...), nil
}

// composeFailsOnce is a store whose first Compose fails (the store down while the log is assembled).
type composeFailsOnce struct {
	objstore.Store
	failed bool
}

func (s *composeFailsOnce) Compose(ctx context.Context, dst string, srcs []string, opts objstore.PutOptions) error {
	if !s.failed {
		s.failed = true
		return errors.New("store down")
	}
	return s.Store.Compose(ctx, dst, srcs, opts)
}

// TestRecordRunKeepsAGapAcrossARetry: a run whose capture recorded a gap, then failed to assemble
// its log (the store down), is recorded incomplete when a later attempt assembles it, though that
// attempt found no gap of its own. Before, the gap written by the failed attempt went around the
// run's known gaps (runRecords), which then said "none" for sure: the log was recorded complete,
// and its pod archived complete, with the gap in the database.
func TestRecordRunKeepsAGapAcrossARetry(t *testing.T) {
	r, store, logged, job, ref, _ := captureRig(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// One segment of the run, stored, with its hash state, as a capture leaves it.
	line := "2023-11-14T22:13:20.000000000Z hello\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(line))
	_ = zw.Close()
	segKey, err := r.Layout.Segment(job, ref.Pod, ref.PodUID, ref.Container, ref.Run, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, segKey, bytes.NewReader(gz.Bytes()), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte(line))
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	seg := record.Segment{PodUID: ref.PodUID, Container: ref.Container, Seq: 0, ObjectKey: segKey, StoredBytes: int64(gz.Len()),
		Bytes: int64(len(line)), TotalBytes: int64(len(line)), LastTime: time.Unix(1_700_000_000, 0).UTC(), LastTimeLines: 1, HashState: state}
	records := &segmentRecords{loggedRecords: logged, segs: []record.Segment{seg}}
	r.Records = records
	r.Store = &composeFailsOnce{Store: store}
	recs := &runRecords{Records: records, segments: records.segs}

	if err := r.recordRun(ctx, job, ref, record.ContainerRegular, record.GapUnreadable, "deadline passed", nil, recs); err == nil {
		t.Fatal("the first attempt recorded the run with the store down")
	}
	if len(records.gaps) != 1 {
		t.Fatalf("%d gaps recorded by the failed attempt, want 1", len(records.gaps))
	}
	if err := r.recordRun(ctx, job, ref, record.ContainerRegular, "", "", nil, recs); err != nil {
		t.Fatalf("the second attempt: %v", err)
	}
	if len(logged.logs) != 1 {
		t.Fatalf("%d log rows, want 1", len(logged.logs))
	}
	row := logged.logs[0]
	if row.State != record.LogStored || !strings.Contains(row.Reason, string(record.GapUnreadable)) {
		t.Errorf("log recorded %s with reason %q, want stored with the gap %q its run has in the database", row.State, row.Reason, record.GapUnreadable)
	}
}
