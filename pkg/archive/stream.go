package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// LogContentType is the type of an archived log once decompressed.
const LogContentType = "text/plain; charset=utf-8"

// Stored describes an object written by Upload.
type Stored struct {
	Key string
	// Bytes and SHA256 (lower-case hex) describe the uncompressed content; StoredBytes the object.
	Bytes       int64
	StoredBytes int64
	SHA256      string
}

// SourceError wraps a failure to read the source of an upload (for logs: the pods/log stream), as
// opposed to a failure of the store. The caller retries the first kind only until its deadline.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "read source: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// IsSourceError reports whether err came from reading the upload's source.
func IsSourceError(err error) bool {
	var s *SourceError
	return errors.As(err, &s)
}

// copyBuffer is the read size from the source: large enough that per-call overhead vanishes
// against gzip's cost, small enough that memory stays flat (one buffer per upload).
const copyBuffer = 256 << 10

// Upload streams src through gzip into store under key, counting and hashing the uncompressed
// bytes on the way. Memory is bounded by one copy buffer, gzip's window and the store's part
// size, whatever the size of src. A failure to read src is returned as a *SourceError and leaves
// no object under key (the store aborts the upload when its reader fails).
func Upload(ctx context.Context, store objstore.Store, key string, src io.Reader) (Stored, error) {
	pr, pw := io.Pipe()
	hash := sha256.New()
	plain := &counter{}
	stored := &counter{}
	srcErr := make(chan error, 1)
	go func() {
		// The pipe makes the store pull at its own pace; this goroutine ends when src is drained
		// or the store stops reading (pr closed below).
		zw, _ := gzip.NewWriterLevel(io.MultiWriter(pw, stored), gzip.BestSpeed)
		dst := markWrites{io.MultiWriter(zw, hash, plain)}
		_, err := io.CopyBuffer(dst, onlyReader{src}, make([]byte, copyBuffer))
		if err != nil {
			var we *writeError
			if !errors.As(err, &we) {
				err = &SourceError{Err: err}
			}
			srcErr <- err
			pw.CloseWithError(err)
			return
		}
		err = zw.Close()
		srcErr <- nil
		pw.CloseWithError(err)
	}()
	putErr := store.Put(ctx, key, pr, objstore.PutOptions{ContentType: LogContentType, ContentEncoding: "gzip"})
	pr.CloseWithError(errors.New("upload ended")) // unblocks the copier if the store gave up early
	if err := <-srcErr; err != nil && IsSourceError(err) {
		return Stored{}, fmt.Errorf("upload %s: %w", key, err)
	}
	if putErr != nil {
		return Stored{}, fmt.Errorf("upload %s: %w", key, putErr)
	}
	return Stored{Key: key, Bytes: plain.n, StoredBytes: stored.n, SHA256: hex.EncodeToString(hash.Sum(nil))}, nil
}

// onlyReader hides WriterTo/ReaderFrom so CopyBuffer uses our buffer and read errors stay
// distinguishable from write errors.
type onlyReader struct{ io.Reader }

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// writeError marks a failure on the store side of the pipe (never produced by src).
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// markWrites tags its writer's errors as writeErrors.
type markWrites struct{ io.Writer }

func (m markWrites) Write(p []byte) (int, error) {
	n, err := m.Writer.Write(p)
	if err != nil {
		err = &writeError{err}
	}
	return n, err
}
