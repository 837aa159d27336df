package capture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// staticSource serves the same timestamped stream to every open.
type staticSource struct{ b []byte }

func (s staticSource) Open(context.Context, Ref, OpenOptions) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(s.b)), nil
}

// BenchmarkCaptureThroughput is how fast one capture takes in a log (MB/s of the container's
// output): parsing, compressing, hashing and storing segments on the filesystem, without the API
// server and the node, which serve it. 64 MiB of 110-byte lines, as the full-scale rotation proof
// (test/e2e/archiver) writes them.
func BenchmarkCaptureThroughput(b *testing.B) {
	var stream bytes.Buffer
	ts := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	content := 0
	for stream.Len() < 64<<20 {
		line := fmt.Sprintf("at scale chunk %d at %d: %s\n", stream.Len()/350_000, stream.Len(), strings.Repeat("=", 90))
		stream.WriteString(ts.Format(time.RFC3339Nano) + " " + line)
		content += len(line)
		ts = ts.Add(time.Microsecond)
	}
	store, err := objstore.NewFS(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(content))
	for i := 0; b.Loop(); i++ {
		ref := Ref{Namespace: "ns", Pod: "p", PodUID: fmt.Sprint(i), Container: "main"}
		_, err := Capture(context.Background(), DefaultConfig, staticSource{stream.Bytes()}, &memRecords{segs: map[string][]record.Segment{}}, store,
			func(seq int32) string { return fmt.Sprintf("%d/%d", i, seq) }, ref,
			func(context.Context) (End, error) { return End{Over: true}, nil }, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
}
