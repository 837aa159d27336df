package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
)

// source wraps the reader given to Put.
//
// It checks ctx before every Read, so a cancelled Put stops consuming a source that keeps
// producing data (a blocked Read cannot be interrupted; the caller's stream must honour ctx too).
//
// It also hides io.ErrUnexpectedEOF behind a wrapper: minio-go treats that exact value as the
// normal end of a short part and would complete the upload, storing a truncated object when, for
// example, a log stream's HTTP body breaks. errors.Is still finds it.
//
// Given a checksum (PutOptions.Checksum), it hashes what it passes on and, at the end, fails with
// ErrChecksum instead of io.EOF when that is not what the checksum says: every backend aborts an
// upload whose source fails, so the object is never finalized (GCS) or renamed into place (fs).
type source struct {
	ctx  context.Context
	r    io.Reader
	want *Checksum
	hash hash.Hash
}

func newSource(ctx context.Context, r io.Reader, want *Checksum) io.Reader {
	s := &source{ctx: ctx, r: r, want: want}
	if want != nil {
		s.hash = sha256.New()
	}
	return s
}

func (s *source) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	if s.hash != nil {
		s.hash.Write(p[:n])
	}
	switch {
	case err == io.EOF && s.hash != nil && !bytes.Equal(s.hash.Sum(nil), s.want.SHA256[:]):
		err = fmt.Errorf("%w: the bytes read have sha256 %x, the checksum says %x", ErrChecksum, s.hash.Sum(nil), s.want.SHA256)
	case err != nil && err != io.EOF:
		err = fmt.Errorf("read source: %w", err)
	}
	return n, err
}

// cancelReadCloser releases a Get's context when the caller closes the reader, because the
// context must outlive the Get call for the body to be read.
type cancelReadCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelReadCloser) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
