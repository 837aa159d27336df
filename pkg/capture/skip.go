package capture

import (
	"fmt"
	"time"
)

// skipWatch spots, in one follow stream, where the node's reader may have skipped rotated files.
//
// At a rotation the kubelet's reader (KWOK's too) finishes the file it holds open, then opens the
// log by name. A stream more than one file behind therefore jumps from the last line of the file
// it read (p) to the first line of the current one (l), and nothing in the stream marks it: the
// files in between are lost. Each of them holds at least the rotation size, and the reader left
// p's file only after they were written, so such a jump needs, at the container's write rate:
//   - the lag: a rotation size of output between p's timestamp and p's arrival;
//   - the jump: a rotation size of output between p's and l's timestamps.
//
// The rate is the highest seen in the stream, and each bound is halved for headroom, since the
// container may have written faster in the files skipped. A container that writes in bursts
// (a file's worth at once, say) passes both bounds at each of its pauses, so the jump must also be
// half as long again as its usual pause (a running average of those seen while the stream kept
// up, forgotten after naturalFor): a skipped file adds its own span to the pause around it. A jump that passes all
// three is recorded as a GapMaybeRotated over exactly its time range: output may be missing there,
// and the record says so. A container that fell silent while its stream lagged looks the same, so
// the gap says "possibly"; one that wrote more than twice as fast in the skipped files as ever
// before in the stream can slip through.
//
// A stream that keeps up loses output at a rotation too: the reader, at the end of the file and
// waiting, takes the rename for its cue to open the new file, and what the container wrote to the
// old one after the reader's last read is never read (under CPU load, a whole chunk of 100 KiB in
// TestCaptureThroughRotation). So a jump of a stream that kept up is a possible loss as well when
// a rotation may fall in it (the file holds, by the bytes the stream delivered, within twice the
// peak rate times the jump of the rotation size) and it is half as long again as every pause the
// container made while its stream kept up (a chunk lost between two makes one twice as long). This errs toward a gap: a container that pauses longer than ever
// just as its file fills looks the same.
type skipWatch struct {
	maxSize int64 // the nodes' rotation size; 0 turns the watch off

	prevTS, prevRecv time.Time // the last line taken from this stream, and when it arrived

	winStart time.Time // the window of timestamps the current rate is measured over
	winBytes int64
	peak     float64 // the highest write rate seen, in bytes (as the node's file holds them) per second

	natural   time.Duration // the container's usual pause, averaged over those seen while the stream kept up ...
	naturalAt time.Time     // ... and the timestamp of the last one

	// filePos is how far the node's current file is filled, by the bytes the stream delivered
	// since it started (from the file's start, or from a resumed position: then an estimate
	// short by what came before) less a rotation size each time it reaches one.
	filePos int64

	// minLag is the smallest lag seen, when negative: the node's clock is ahead of the
	// archiver's by at least that much. Lags are measured from it, so that a clock ahead does not
	// read as a stream that keeps up; a clock behind makes lags longer, which errs toward a gap.
	minLag time.Duration
}

// follow readies the watch for a follow stream, with rotation size maxSize. What it learnt of the
// container in the streams before (its peak rate, its usual pause, its file's fill, the node's
// clock) holds on; a stream reopened often would otherwise watch mostly with nothing learnt. The
// place in the stream does not: the jump from the last line of the stream before is checked by
// the resumed stream, which no longer holds that line if the file rotated in between.
func (w *skipWatch) follow(maxSize int64) {
	w.maxSize = maxSize
	w.prevTS, w.prevRecv, w.winStart, w.winBytes = time.Time{}, time.Time{}, time.Time{}, 0
}

// stop turns the watch off between follow streams (a read without follow is not watched),
// keeping what it learnt.
func (w *skipWatch) stop() { w.maxSize = 0 }

// minPause is the shortest jump taken for a pause of the container (lines written together are
// stamped microseconds apart).
const minPause = time.Millisecond

// naturalFor is how long, in the stream's timestamps, a pause seen while the stream kept up counts.
const naturalFor = 30 * time.Second

// rateWindow is the span of timestamps a write rate is measured over.
const rateWindow = 250 * time.Millisecond

// provisionalSpan is the least span of timestamps the rate so far stands in for the peak over,
// before the first window is measured.
const provisionalSpan = rateWindow / 2

// take records that line l of the stream arrived at recv and, if the jump from the line before
// may hide skipped files, returns why (else "").
func (w *skipWatch) take(l line, recv time.Time) string {
	if w.maxSize <= 0 {
		return ""
	}
	var why string
	if lag := recv.Sub(l.ts); lag < w.minLag {
		w.minLag = lag
	}
	jump, lag := l.ts.Sub(w.prevTS), w.prevRecv.Sub(w.prevTS)-w.minLag
	half := float64(w.maxSize) / 2
	peak := w.peak
	if span := w.prevTS.Sub(w.winStart); peak == 0 && !w.winStart.IsZero() && span >= provisionalSpan {
		// No window measured yet: the stream's first quarter second. The rate so far stands in
		// (over at least provisionalSpan, so that one burst is not taken for a rate): a stream
		// that falls a file behind that early skips files as well (TestCaptureRecordsSkippedFilesAsGap
		// lost 750 KiB 250 ms into its run with no gap).
		peak = float64(w.winBytes) / span.Seconds()
	}
	natural := w.natural
	if l.ts.Sub(w.naturalAt) > naturalFor {
		natural = 0
	}
	switch {
	case w.prevTS.IsZero() || jump <= 0:
	case peak*lag.Seconds() < half:
		// Kept up: no file skipped here, but the rest of the one read may be lost if it rotated.
		if natural > 0 && jump > natural*3/2 && float64(w.filePos)+2*peak*jump.Seconds() >= float64(w.maxSize) {
			why = fmt.Sprintf("the follow stream kept up, but its timestamps jumped by %s, longer than the container's pauses (%s), where the node may have rotated its file (about %d of %d bytes, at a peak rate of %.0f bytes/s): at a rotation the node's reader leaves unread what was written to the old file after its last read",
				jump.Round(time.Millisecond), natural.Round(time.Millisecond), w.filePos, w.maxSize, peak)
			w.filePos = 0 // l starts the new file
		} else if jump >= minPause {
			// A running average, not the longest: a container's pauses vary (under CPU load its
			// writes come late), and the longest would hide a lost chunk between two pauses.
			w.natural, w.naturalAt = (3*natural+jump)/4, l.ts
			if natural == 0 {
				w.natural = jump
			}
		}
	case peak*jump.Seconds() >= half && jump > natural*3/2:
		why = fmt.Sprintf("the follow stream was %s behind its container when its timestamps jumped by %s; at the container's peak rate of %.0f bytes/s both could hold a rotated file (%d bytes), and the node's reader skips the files a stream is more than one behind",
			lag.Round(time.Millisecond), jump.Round(time.Millisecond), peak, w.maxSize)
	}
	// The rate: bytes per second of timestamps, over windows of rateWindow or more. A pause of a
	// window or more starts a new one, so that silence does not dilute the rate.
	if jump >= rateWindow || w.winStart.IsZero() || l.ts.Before(w.winStart) {
		w.winStart, w.winBytes = l.ts, 0 // the window starts at this line: its bytes came before
	} else if w.winBytes += int64(l.fileBytes); l.ts.Sub(w.winStart) >= rateWindow {
		w.peak = max(w.peak, float64(w.winBytes)/l.ts.Sub(w.winStart).Seconds())
		w.winStart, w.winBytes = l.ts, 0
	}
	if w.filePos += int64(l.fileBytes); w.filePos >= w.maxSize {
		w.filePos -= w.maxSize // rotated about here: an overestimate of the new file's fill, toward a gap
	}
	w.prevTS, w.prevRecv = l.ts, recv
	return why
}
