package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// benchLog writes a run's log of about size bytes of 200-byte lines, stdout and stderr in turn,
// stamped to the nanosecond as containerd stamps them, in one file, and returns the pod logs dir.
func benchLog(b *testing.B, size int) string {
	b.Helper()
	root := b.TempDir()
	dir := filepath.Join(root, "ns_pod_uid1", "main")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "0.log"))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	t0 := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	body := strings.Repeat("x", 160)
	for i, n := 0, 0; n < size; i++ {
		stream := "stdout"
		if i%2 == 1 {
			stream = "stderr"
		}
		k, _ := fmt.Fprintf(w, "%s %s F line %08d %s\n", t0.Add(time.Duration(i)*time.Microsecond+123).Format(time.RFC3339Nano), stream, i, body)
		n += k
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	return root
}

// BenchmarkReader is the agent's file reader alone: a run's CRI file served as pods/log serves it,
// each line's streams asked for as the capture asks (the CPU per byte the agent adds to the
// capture's own).
func BenchmarkReader(b *testing.B) {
	root := benchLog(b, 32<<20)
	s, err := NewFileSource(root, 0, nil, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	st, _ := os.Stat(filepath.Join(root, "ns_pod_uid1", "main", "0.log"))
	b.SetBytes(st.Size())
	b.ResetTimer()
	for range b.N {
		rc, err := s.Open(context.Background(), ref, capture.OpenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReaderSize(rc, 64<<10)
		tagger := rc.(capture.StreamTagger)
		var off int64
		for {
			l, err := br.ReadSlice('\n')
			if len(l) > 0 {
				sp := strings.IndexByte(string(l[:min(len(l), 40)]), ' ') + 1
				tagger.Streams(off+int64(sp), off+int64(len(l)))
				off += int64(len(l))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkCapture is a run's whole capture by the agent: its file read, segmented, compressed
// and stored (to a local directory), recorded in memory.
func BenchmarkCapture(b *testing.B) {
	root := benchLog(b, 32<<20)
	st, _ := os.Stat(filepath.Join(root, "ns_pod_uid1", "main", "0.log"))
	b.SetBytes(st.Size())
	cfg := capture.Config{SegmentBytes: 8 << 20, SegmentAge: time.Hour, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	over := func(context.Context) (capture.End, error) { return capture.End{Over: true}, nil }
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := NewFileSource(root, 0, nil, logr.Discard())
		if err != nil {
			b.Fatal(err)
		}
		store, err := objstore.NewFS(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		segKey := func(seq int32) string { return fmt.Sprintf("seg/%d", seq) }
		b.StartTimer()
		if _, err := capture.Capture(context.Background(), cfg, s, s.Records(&memRecords{}), store, segKey, ref, over, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.close()
		b.StartTimer()
	}
}
