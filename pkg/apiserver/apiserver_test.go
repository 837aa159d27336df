package apiserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// tail runs the two passes of logStream.copy over log in writes of size n.
func tail(log string, lines int64, limit *int64, n int) (string, error) {
	c := &lineCounter{}
	feed(c, log, n)
	var out bytes.Buffer
	var w interface{ Write([]byte) (int, error) } = &out
	if limit != nil {
		w = &limitWriter{w: w, left: *limit}
	}
	if skip := max(c.lines()-lines, 0); skip > 0 {
		w = &lineSkipper{w: w, skip: skip}
	}
	err := feed(w, log, n)
	if errors.Is(err, errLimitReached) {
		err = nil
	}
	return out.String(), err
}

func feed(w interface{ Write([]byte) (int, error) }, s string, n int) error {
	for len(s) > 0 {
		k := min(n, len(s))
		if _, err := w.Write([]byte(s[:k])); err != nil {
			return err
		}
		s = s[k:]
	}
	return nil
}

func TestTailAndLimit(t *testing.T) {
	ten := int64(10)
	for _, c := range []struct {
		name  string
		log   string
		lines int64
		limit *int64
		want  string
	}{
		{"last line", "a\nb\nc\n", 1, nil, "c\n"},
		{"last two, no final newline", "a\nb\nc", 2, nil, "b\nc"},
		{"more lines than the log", "a\nb\n", 5, nil, "a\nb\n"},
		{"zero lines", "a\nb\n", 0, nil, ""},
		{"empty lines count", "a\n\n\n", 2, nil, "\n\n"},
		{"limit after tail", "aaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbbbbbb\n", 1, &ten, "bbbbbbbbbb"},
		{"a long line", strings.Repeat("x", 100) + "\n" + strings.Repeat("y", 100), 1, nil, strings.Repeat("y", 100)},
	} {
		for _, n := range []int{1, 3, 1 << 10} {
			got, err := tail(c.log, c.lines, c.limit, n)
			if err != nil || got != c.want {
				t.Errorf("%s (writes of %d): got %q, %v; want %q", c.name, n, got, err, c.want)
			}
		}
	}
}

func TestLimitWriterStopsTheCopy(t *testing.T) {
	var out bytes.Buffer
	w := &limitWriter{w: &out, left: 4}
	if _, err := w.Write([]byte("abcdef")); !errors.Is(err, errLimitReached) {
		t.Errorf("write past the limit: %v, want errLimitReached", err)
	}
	if _, err := w.Write([]byte("g")); !errors.Is(err, errLimitReached) {
		t.Errorf("write after the limit: %v, want errLimitReached", err)
	}
	if out.String() != "abcd" {
		t.Errorf("wrote %q, want abcd", out.String())
	}
}

func TestFieldSelector(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		sel     string
		ns      string
		want    db.JobFilter
		wantErr string
	}{
		{sel: "spec.submitter=alice,status.phase==Failed,status.archiveState=released", ns: "a",
			want: db.JobFilter{Namespace: "a", Submitter: "alice", Phase: "Failed", ArchiveState: record.ArchiveReleased}},
		{sel: "createdFrom=2026-11-01T00:00:00Z,metadata.name=j", ns: "a", want: db.JobFilter{Namespace: "a", Name: "j", CreatedFrom: from}},
		{sel: "status.archiveState=lost", ns: "a", wantErr: "the states are"},
		{sel: "spec.submitter!=alice", ns: "a", wantErr: "only = is supported"},
		{sel: "spec.queue=q", ns: "a", wantErr: "not supported"},
		{sel: "createdBefore=yesterday", ns: "a", wantErr: "RFC 3339"},
		{sel: "metadata.name=j", ns: "", wantErr: "needs a namespace"},
		{sel: "metadata.namespace=b", ns: "a", wantErr: "does not match"},
	} {
		sel, err := fields.ParseSelector(c.sel)
		if err != nil {
			t.Fatal(err)
		}
		f := db.JobFilter{Namespace: c.ns}
		err = applyFieldSelector(&f, &metainternalversion.ListOptions{FieldSelector: sel})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: %v, want an error with %q", c.sel, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.sel, err)
		} else if diff := cmp.Diff(c.want, f); diff != "" {
			t.Errorf("%s: filter (-want +got):\n%s", c.sel, diff)
		}
	}
}

func TestContinueToken(t *testing.T) {
	c := db.Cursor{CreatedAt: time.Date(2026, 11, 25, 7, 0, 0, 123456000, time.UTC), UID: "u-1"}
	got, err := decodeContinue(encodeContinue(c))
	if err != nil || !got.CreatedAt.Equal(c.CreatedAt) || got.UID != c.UID {
		t.Errorf("round trip of %+v: %+v, %v", c, got, err)
	}
	for _, bad := range []string{"%%%", "e30", "bm90IGpzb24"} { // not base64, {}, "not json"
		if _, err := decodeContinue(bad); err == nil {
			t.Errorf("decodeContinue(%q) accepted", bad)
		}
	}
}

// allowOnly allows exactly the attributes it lists (by verb, group, resource and subresource).
type allowOnly []string

func (a allowOnly) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	key := attrs.GetVerb() + " " + attrs.GetAPIGroup() + "/" + attrs.GetResource() + "/" + attrs.GetSubresource()
	if !attrs.IsResourceRequest() {
		key = attrs.GetVerb() + " " + attrs.GetPath()
	}
	for _, k := range a {
		if k == key {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func TestMirrorAuthorizes(t *testing.T) {
	u := &user.DefaultInfo{Name: "ann"}
	archive := func(verb, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Namespace: "a", APIGroup: "archive.jobvault.io", APIVersion: "v1alpha1",
			Resource: "archivedjobs", Subresource: sub, Name: "j", ResourceRequest: true}
	}
	const (
		gate    = "get archive.jobvault.io/archivedjobs/"
		vcjobs  = "get batch.volcano.sh/jobs/"
		listVC  = "list batch.volcano.sh/jobs/"
		podLogs = "get /pods/log"
		read    = "read archive.jobvault.io/archivedjobs/"
		readLog = "read archive.jobvault.io/archivedjobs/log"
	)
	for _, c := range []struct {
		name    string
		grants  allowOnly
		request authorizer.AttributesRecord
		allowed bool
	}{
		{"the gate alone allows nothing", allowOnly{gate}, archive("get", ""), false},
		{"get vcjobs allows get", allowOnly{vcjobs}, archive("get", ""), true},
		{"get vcjobs does not allow list", allowOnly{vcjobs}, archive("list", ""), false},
		{"list vcjobs allows list", allowOnly{listVC}, archive("list", ""), true},
		{"get vcjobs does not allow logs", allowOnly{vcjobs}, archive("get", "log"), false},
		{"pods/log allows logs", allowOnly{podLogs}, archive("get", "log"), true},
		{"read allows get and list", allowOnly{read}, archive("list", ""), true},
		{"read does not allow logs", allowOnly{read}, archive("get", "log"), false},
		{"read on the log allows logs", allowOnly{readLog}, archive("get", "log"), true},
		{"pods/log allows verify", allowOnly{podLogs}, archive("get", "verify"), true},
		{"read on the log allows verify", allowOnly{readLog}, archive("get", "verify"), true},
		{"get vcjobs does not allow verify", allowOnly{vcjobs, read}, archive("get", "verify"), false},
		{"watch is not served", allowOnly{read, vcjobs, "watch archive.jobvault.io/archivedjobs/"}, archive("watch", ""), false},
		{"discovery goes to the delegate", allowOnly{"get /apis/archive.jobvault.io/v1alpha1"},
			authorizer.AttributesRecord{User: u, Verb: "get", Path: "/apis/archive.jobvault.io/v1alpha1"}, true},
		{"other groups go to the delegate", allowOnly{"get /pods/"},
			authorizer.AttributesRecord{User: u, Verb: "get", Resource: "pods", ResourceRequest: true}, true},
	} {
		d, reason, err := mirror{delegate: c.grants}.Authorize(t.Context(), c.request)
		if err != nil || (d == authorizer.DecisionAllow) != c.allowed {
			t.Errorf("%s: decision %v (%s), %v; want allowed %v", c.name, d, reason, err, c.allowed)
		}
	}
}

// TestLogStreamMemoryFlat streams a 256 MiB log (gzip in the fs store) through the log
// subresource's streamer, whole and tailed (two passes), one line of it 64 MiB long: the heap
// stays within a few MiB of where it started, whatever the log's size.
func TestLogStreamMemoryFlat(t *testing.T) {
	const size = 256 << 20
	store, err := objstore.New(t.Context(), objstore.Config{Backend: objstore.BackendFS, FSRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		line := bytes.Repeat([]byte("0123456789abcdef"), 1<<10) // 16 KiB
		line[len(line)-1] = '\n'
		written := 0
		for written < size-(64<<20) {
			n, _ := zw.Write(line)
			written += n
		}
		long := bytes.Repeat([]byte("x"), 1<<20)
		for range 64 { // one 64 MiB line without newline at the end
			n, _ := zw.Write(long)
			written += n
		}
		pw.CloseWithError(zw.Close())
	}()
	if err := store.Put(t.Context(), "log.gz", pr, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	for _, tail := range []*int64{nil, &two} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		peak := make(chan uint64)
		done := make(chan struct{})
		go func() {
			var m runtime.MemStats
			var top uint64
			for {
				select {
				case <-done:
					peak <- top
					return
				case <-time.After(5 * time.Millisecond):
					runtime.ReadMemStats(&m)
					top = max(top, m.HeapInuse)
				}
			}
		}()
		s := &logStream{store: store, log: inspect.Log{Key: "log.gz"}, tail: tail}
		counted := &lineCounter{}
		n := int64(0)
		err := s.copy(t.Context(), writerFunc(func(p []byte) (int, error) {
			n += int64(len(p))
			return counted.Write(p)
		}))
		close(done)
		top := <-peak
		if err != nil {
			t.Fatalf("copy (tail %v): %v", tail, err)
		}
		wantBytes := int64(size)
		if tail != nil {
			wantBytes = 16<<10 + 64<<20 // the last 16 KiB line and the long one
		}
		if n != wantBytes {
			t.Errorf("copy (tail %v): %d bytes, want %d", tail, n, wantBytes)
		}
		if grew := int64(top) - int64(before.HeapInuse); grew > 16<<20 {
			t.Errorf("copy (tail %v) of a %d MiB log: the heap grew by %d MiB, want less than 16", tail, size>>20, grew>>20)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestVerifyBounded: while maxVerifications run, another verification is refused at once with
// TooManyRequests, before it reads anything; a freed slot serves again.
func TestVerifyBounded(t *testing.T) {
	r := newVerifyREST(&jobsREST{}, nil)
	for range maxVerifications {
		r.slots <- struct{}{}
	}
	if _, err := r.Get(t.Context(), "j", nil); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("verification beyond the bound: %v, want TooManyRequests", err)
	}
	<-r.slots
	// A free slot: the request goes on to look the job up (not found: no namespace).
	if _, err := r.Get(t.Context(), "j", nil); !apierrors.IsNotFound(err) {
		t.Errorf("verification with a slot free: %v, want NotFound of the job", err)
	}
	if len(r.slots) != maxVerifications-1 {
		t.Errorf("%d slots taken after the request, want %d: the slot was not given back", len(r.slots), maxVerifications-1)
	}
}
