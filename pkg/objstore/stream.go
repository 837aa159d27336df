package objstore

import (
	"context"
	"fmt"
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
type source struct {
	ctx context.Context
	r   io.Reader
}

func newSource(ctx context.Context, r io.Reader) io.Reader { return &source{ctx: ctx, r: r} }

func (s *source) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
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
