package audit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// Hashed is what reading an object back tells: the size and sha256 of its stored bytes and, for a
// gzip log when asked, of its content.
type Hashed struct {
	archive.ObjectEntry
	// ContentBytes and ContentSHA256 describe the decompressed content (logs only). ContentErr says
	// why it could not be decompressed: ContentBytes is then what was decompressed before the
	// error, and NotGzip says whether the object does not even start as a gzip stream.
	ContentBytes  int64
	ContentSHA256 string
	ContentErr    error
	NotGzip       bool
}

// HashObject reads the object at key back, streaming, and hashes its stored bytes and, with
// gunzip, its decompressed content too, in the same pass. A store that fails while serving the
// object is the error, never a ContentErr: a corrupt object is told apart from a failing store.
func HashObject(ctx context.Context, store objstore.Store, key string, gunzip bool) (Hashed, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return Hashed{}, err
	}
	defer rc.Close()
	stored := &hashCounter{h: sha256.New()}
	read := &readErr{r: rc}
	src := io.TeeReader(read, stored)
	out := Hashed{ObjectEntry: archive.ObjectEntry{Key: key}}
	if gunzip {
		content := &hashCounter{h: sha256.New()}
		zr, err := gzip.NewReader(src)
		if err != nil {
			out.NotGzip = true
		} else {
			_, err = io.Copy(content, zr)
		}
		if err != nil {
			out.ContentErr, out.ContentBytes = err, content.n
		} else {
			out.ContentBytes, out.ContentSHA256 = content.n, hex.EncodeToString(content.h.Sum(nil))
		}
	}
	// Whatever decompression left unread (trailing bytes, or all of it after an error) is hashed too.
	if _, err := io.Copy(io.Discard, src); err != nil || read.err != nil {
		return Hashed{}, fmt.Errorf("read %s: %w", key, cmp.Or(read.err, err))
	}
	out.Bytes, out.SHA256 = stored.n, hex.EncodeToString(stored.h.Sum(nil))
	return out, nil
}

// readErr keeps the first error of the reader it wraps other than io.EOF: the store's, which
// gzip would otherwise report as its own.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && r.err == nil {
		r.err = err
	}
	return n, err
}

type hashCounter struct {
	h hash.Hash
	n int64
}

func (c *hashCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}
