package apiserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// failingReads is a store whose objects fail to read after their first n bytes.
type failingReads struct {
	objstore.Store
	n int64
}

func (s failingReads) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, s.n), errReader{}), rc}, nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("store connection reset") }

// TestWholeLogCutShortIsAnError: a whole log whose store fails after the response started reaches
// the client as an error, not as a shorter log. The generic handler (StreamObject) ignores the
// copy's error and ends the response cleanly; the whole log's Content-Length makes the early end
// an error. Before, the client read a cleanly ended, shorter log.
func TestWholeLogCutShortIsAnError(t *testing.T) {
	ctx := t.Context()
	fs, err := objstore.New(ctx, objstore.Config{Backend: objstore.BackendFS, FSRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	log := strings.Repeat("a line of the log, written by the container\n", 20000) // 880 KB
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(log))
	_ = zw.Close()
	if err := fs.Put(ctx, "log.gz", bytes.NewReader(gz.Bytes()), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(runtime.NewScheme())
	for name, tc := range map[string]struct {
		store   objstore.Store
		wantErr bool
	}{
		"the store reads whole": {store: fs},
		"the store fails":       {store: failingReads{Store: fs, n: int64(gz.Len() / 2)}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s := &logStream{store: tc.store, log: inspect.Log{Key: "log.gz", Bytes: int64(len(log))}, whole: true, header: w.Header()}
				responsewriters.StreamObject(http.StatusOK, schema.GroupVersion{}, codecs, s, w, r)
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			switch {
			case tc.wantErr && err == nil:
				t.Errorf("read %d of the log's %d bytes with no error: a log cut short looks whole", len(got), len(log))
			case !tc.wantErr && (err != nil || string(got) != log):
				t.Errorf("read %d of %d bytes, error %v; want the whole log", len(got), len(log), err)
			}
		})
	}
}
