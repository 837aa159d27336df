package audit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// failOnce is a store whose reads fail once, after some bytes, and then end as if the object did:
// a connection cut that a reader reports once.
type failOnce struct {
	objstore.Store
	after int
}

var errCut = errors.New("connection reset")

func (s failOnce) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &cutReader{ReadCloser: rc, left: s.after}, nil
}

type cutReader struct {
	io.ReadCloser
	left int
	cut  bool
}

func (r *cutReader) Read(p []byte) (int, error) {
	switch {
	case r.cut:
		return 0, io.EOF
	case r.left == 0:
		r.cut = true
		return 0, errCut
	}
	n, err := r.ReadCloser.Read(p[:min(len(p), r.left)])
	r.left -= n
	return n, err
}

// TestHashObject: a corrupt object is a ContentErr (NotGzip when it is no gzip stream at all), a
// store failing mid-read is the error, however the store's reader reports it.
func TestHashObject(t *testing.T) {
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("line of output\n"), 4096))
	zw.Close()
	truncated := gz.Bytes()[:gz.Len()/2]
	for key, b := range map[string][]byte{"log.gz": gz.Bytes(), "plain": []byte("not gzip\n"), "truncated.gz": truncated} {
		if err := store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	h, err := HashObject(t.Context(), store, "log.gz", true)
	if err != nil || h.ContentErr != nil || h.ContentBytes != 4096*15 || h.Bytes != int64(gz.Len()) {
		t.Errorf("intact: %+v, %v", h, err)
	}
	if h, err := HashObject(t.Context(), store, "plain", true); err != nil || h.ContentErr == nil || !h.NotGzip || h.Bytes != 9 {
		t.Errorf("not gzip: %+v, %v; want a ContentErr with NotGzip, and its 9 bytes hashed", h, err)
	}
	if h, err := HashObject(t.Context(), store, "truncated.gz", true); err != nil || h.ContentErr == nil || h.NotGzip || h.ContentBytes == 0 {
		t.Errorf("truncated: %+v, %v; want a ContentErr after some content", h, err)
	}
	if h, err := HashObject(t.Context(), failOnce{Store: store, after: gz.Len() / 3}, "log.gz", true); !errors.Is(err, errCut) {
		t.Errorf("store cut mid-read: %+v, %v; want the store's error, not a corrupt object", h, err)
	}
}
