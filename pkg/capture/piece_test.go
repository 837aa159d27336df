package capture

import (
	"bufio"
	"bytes"
	"testing"
)

// TestReadPieceAllocatesOnce: a piece of a long line is one allocation, not one per buffer the
// reader fills (a tenant's long lines would cost the GC a quarter MiB a piece).
func TestReadPieceAllocatesOnce(t *testing.T) {
	line := append(bytes.Repeat([]byte("x"), 4*pieceSize), '\n')
	rd := bytes.NewReader(line)
	br := bufio.NewReaderSize(rd, readBuffer)
	allocs := testing.AllocsPerRun(20, func() {
		rd.Reset(line)
		br.Reset(rd)
		piece, err := readPiece(br)
		if err != bufio.ErrBufferFull || len(piece) != pieceSize {
			t.Fatalf("readPiece = %d bytes, %v; want %d, bufio.ErrBufferFull", len(piece), err, pieceSize)
		}
	})
	if allocs > 1 {
		t.Errorf("readPiece of a long line: %.0f allocations, want 1", allocs)
	}
}
