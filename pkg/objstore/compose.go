package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// checkCompose reports why Compose may not write srcs to dst on any backend: an invalid key, no
// source at all, or dst among the sources (a service would read the object it is replacing).
func checkCompose(dst string, srcs []string) error {
	if err := ValidateKey(dst); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return errors.New("no source objects")
	}
	for i, src := range srcs {
		if err := ValidateKey(src); err != nil {
			return fmt.Errorf("source %d: %w", i, err)
		}
		if src == dst {
			return fmt.Errorf("the destination is also source %d", i)
		}
	}
	return nil
}

// bounded calls fn with ctx bounded by timeout. Compose bounds each of its steps with the timeout
// meant for it, rather than the whole call, which moves as much data as the sources hold.
func bounded(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx)
}

// concat reads objects one after the other, as one stream. It opens each object only when the
// previous one is exhausted, so at most one is open; Close closes that one.
type concat struct {
	names []string                           // of the objects, in order, for errors
	open  func(i int) (io.ReadCloser, error) // opens object i
	next  int                                // the object to open when cur is exhausted
	cur   io.ReadCloser
}

func (c *concat) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			if c.next == len(c.names) {
				return 0, io.EOF
			}
			rc, err := c.open(c.next)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", c.names[c.next], err)
			}
			c.cur = rc
			c.next++
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			err = c.cur.Close()
			c.cur = nil
			if err == nil && n == 0 {
				continue // next object, without handing the caller an empty read
			}
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", c.names[c.next-1], err)
		}
		return n, nil
	}
}

func (c *concat) Close() error {
	if c.cur == nil {
		return nil
	}
	err := c.cur.Close()
	c.cur = nil
	return err
}
