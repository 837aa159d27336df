package capture

import (
	"bufio"
	"bytes"
	"testing"
)

// TestReadPieceAllocatesLittle: a piece of a long line is a few allocations, not one per buffer
// the reader fills (append's growth took eight, a quarter MiB a piece of a tenant's long lines),
// and a line of a few KiB takes about twice its size, not a whole piece's.
func TestReadPieceAllocatesLittle(t *testing.T) {
	for name, tc := range map[string]struct {
		line      int
		want      int // the piece's length
		allocs    float64
		maxBuffer int
	}{
		"a long line":  {line: 4 * pieceSize, want: pieceSize, allocs: 4, maxBuffer: pieceSize},
		"a 5 KiB line": {line: 5 << 10, want: 5<<10 + 1, allocs: 2, maxBuffer: 2 * readBuffer},
	} {
		t.Run(name, func(t *testing.T) {
			line := append(bytes.Repeat([]byte("x"), tc.line), '\n')
			rd := bytes.NewReader(line)
			br := bufio.NewReaderSize(rd, readBuffer)
			var piece []byte
			allocs := testing.AllocsPerRun(20, func() {
				rd.Reset(line)
				br.Reset(rd)
				var err error
				if piece, err = readPiece(br); len(piece) != tc.want {
					t.Fatalf("readPiece = %d bytes, %v; want %d", len(piece), err, tc.want)
				}
			})
			if allocs > tc.allocs || cap(piece) > tc.maxBuffer {
				t.Errorf("readPiece: %.0f allocations, a piece of %d bytes in %d; want at most %.0f, in at most %d",
					allocs, len(piece), cap(piece), tc.allocs, tc.maxBuffer)
			}
		})
	}
}
