package capture

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// lostReplyRecords commits the first segment but answers with an error, as a database whose reply
// was lost does; a later, different segment under a number taken is refused as the database
// refuses it (db.ErrSegmentConflict).
type lostReplyRecords struct {
	*memRecords
	lost bool
}

func (l *lostReplyRecords) PutSegment(ctx context.Context, s record.Segment) error {
	have, _ := l.Segments(ctx, s.PodUID, s.Container, s.Run)
	for _, h := range have {
		if h.Seq == s.Seq {
			if reflect.DeepEqual(h, s) {
				return nil
			}
			return fmt.Errorf("segment %d recorded with other contents", s.Seq)
		}
	}
	if err := l.memRecords.PutSegment(ctx, s); err != nil {
		return err
	}
	if !l.lost {
		l.lost = true
		return errors.New("read tcp: connection reset by peer (the commit went through)")
	}
	return nil
}

// TestCaptureResumesAfterALostRecordReply: a segment recorded whose reply was lost is durable; the
// capture must not go on filling that segment and store it again, bigger, under the same key (the
// recorded row would then describe other bytes than its object holds). It starts over from what
// is recorded, as the archiver runs it again, and the log is exact.
func TestCaptureResumesAfterALostRecordReply(t *testing.T) {
	r := newRig(t)
	recs := &lostReplyRecords{memRecords: r.recs}
	ctx := t.Context()
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil { // the archiver runs a failed capture again (captureRun)
			if _, err := Capture(ctx, r.cfg, r.node, recs, r.store, r.segKey, r.ref, r.over, nil); err == nil {
				done <- nil
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		done <- ctx.Err()
	}()
	for i := range 40 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %02d of some length to fill segments\n", i))
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	r.end(t, done)
	if !recs.lost {
		t.Fatal("no segment was recorded: the test did not lose a reply")
	}
	r.check(t)
}
