package capture

import "testing"

// TestStreamIndexBounded: a tenant alternating short lines on stdout and stderr cannot make a
// segment's stream index grow past MaxSegmentStreams: the rest of the segment's bytes are
// recorded as one run of unknown stream, and the index still covers every byte.
func TestStreamIndexBounded(t *testing.T) {
	var x streamIndex
	const segBytes = 1 << 20
	for i := 0; i < segBytes/2; i++ {
		x.add(StreamRun{Stream: Stream(1 + i%2), Bytes: 2}) // "a\n" on stdout, "b\n" on stderr
	}
	b := x.bytes()
	if len(b) > MaxSegmentStreams {
		t.Fatalf("stream index of one 1 MiB segment is %d bytes, want at most %d", len(b), MaxSegmentStreams)
	}
	runs, err := DecodeStreams(b)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range runs {
		total += r.Bytes
	}
	if total != segBytes {
		t.Errorf("index covers %d bytes, the segment holds %d", total, segBytes)
	}
	if last := runs[len(runs)-1]; last.Stream != StreamUnknown || runs[0].Stream != StreamStdout {
		t.Errorf("index starts with %+v and ends with %+v, want stdout first and the rest unknown", runs[0], last)
	}
	x.reset()
	x.add(StreamRun{Stream: StreamStderr, Bytes: 5})
	if runs, _ := DecodeStreams(x.bytes()); len(runs) != 1 || runs[0].Stream != StreamStderr {
		t.Errorf("after reset the index is %+v, want the next segment's streams known again", runs)
	}
}
