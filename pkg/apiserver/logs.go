package apiserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// logREST serves archivedjobs/log: one container run's archived log, streamed from the store in
// bounded memory whatever its size: the stored gzip object as it lies when the client accepts
// gzip, wants the whole log and the object is one gzip member (oneMember), decompressed on the
// way otherwise.
type logREST struct {
	jobs  *jobsREST
	store objstore.Store
}

var (
	_ rest.GetterWithOptions = (*logREST)(nil)
	_ rest.StorageMetadata   = (*logREST)(nil)
)

func (r *logREST) New() runtime.Object { return &v1alpha1.ArchivedJob{} }
func (r *logREST) Destroy()            {}

// ProducesMIMETypes says the log is plain text, as pods/log's.
func (r *logREST) ProducesMIMETypes(string) []string { return []string{"text/plain"} }

// ProducesObject says the response is a string, not an object.
func (r *logREST) ProducesObject(string) any { return "" }

// NewGetOptions returns the log's query parameters.
func (r *logREST) NewGetOptions() (runtime.Object, bool, string) {
	return &v1alpha1.ArchivedJobLogOptions{}, false, ""
}

// Get finds the log the options select among the job's recorded ones and returns a streamer of
// it. Every refusal (no such pod, container or run, a log that is unavailable) is an error status
// before any byte is sent.
func (r *logREST) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	o, ok := opts.(*v1alpha1.ArchivedJobLogOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	if err := validateLogOptions(o); err != nil {
		return nil, err
	}
	job, err := r.jobs.find(ctx, genericapirequest.NamespaceValue(ctx), name)
	if err != nil {
		return nil, err
	}
	logs, err := inspect.List(ctx, r.jobs.records, job.UID)
	if err != nil {
		return nil, internal(err)
	}
	l, err := selectLog(logs, o)
	if err != nil {
		return nil, err
	}
	if l.State != record.LogStored {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the log of container %q (%s) of pod %s was not archived: %s", l.Container, l.Instance, l.Pod, l.Reason))
	}
	if o.Timestamps {
		warning.AddWarning(ctx, "", noTimestampsWarning(l))
	}
	enc := responseEncodingFrom(ctx)
	// Caches must not answer one encoding with the other.
	enc.header.Add("Vary", "Accept-Encoding")
	whole := wholeLog(o, l)
	return &logStream{store: r.store, log: l, tail: o.TailLines, limit: o.LimitBytes, header: enc.header,
		whole: whole, gzip: enc.gzip && whole}, nil
}

// noTimestampsWarning tells a client that asked for timestamps that l is served without them.
func noTimestampsWarning(l inspect.Log) string {
	return fmt.Sprintf("the archive holds no timestamps: the log of pod %s, container %s (%s) is printed as the container wrote it, without them",
		l.Pod, l.Container, l.Instance)
}

// wholeLog reports whether the options ask for all of l's bytes: no tail, and no limit or one at
// or past its recorded size. Only then can its gzip object be sent as it lies.
func wholeLog(o *v1alpha1.ArchivedJobLogOptions, l inspect.Log) bool {
	return o.TailLines == nil && (o.LimitBytes == nil || *o.LimitBytes >= l.Bytes)
}

func validateLogOptions(o *v1alpha1.ArchivedJobLogOptions) error {
	var problems []string
	if o.TailLines != nil && *o.TailLines < 0 {
		problems = append(problems, "tailLines must be 0 or more")
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		problems = append(problems, "limitBytes must be 1 or more")
	}
	if o.Previous && o.Instance != "" {
		problems = append(problems, "previous and instance are exclusive")
	}
	if len(problems) > 0 {
		return apierrors.NewBadRequest(strings.Join(problems, "; "))
	}
	return nil
}

// selectLog picks the log the options name: the pod (by name or UID; the job's only pod when
// unnamed), the container (the pod's only one when unnamed) and the run (current; previous: the
// last previous-N; or the instance named).
func selectLog(logs []inspect.Log, o *v1alpha1.ArchivedJobLogOptions) (inspect.Log, error) {
	pod := o.Pod
	if pod == "" {
		pods := distinct(logs, func(l inspect.Log) string { return l.Pod })
		if len(pods) != 1 {
			return inspect.Log{}, apierrors.NewBadRequest(fmt.Sprintf("a pod must be named for a job with %d pods with logs: choose one of %v", len(pods), pods))
		}
		pod = pods[0]
	}
	container := o.Container
	if container == "" {
		names := distinct(logs, func(l inspect.Log) string {
			if l.Pod == pod || l.PodUID == pod {
				return l.Container
			}
			return ""
		})
		if len(names) != 1 {
			return inspect.Log{}, apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod, names))
		}
		container = names[0]
	}
	instance := o.Instance
	if o.Previous {
		instance = lastPrevious(logs, pod, container)
		if instance == "" {
			return inspect.Log{}, apierrors.NewBadRequest(fmt.Sprintf("previous terminated container %q in pod %q not found in the archive", container, pod))
		}
	}
	l, err := inspect.Select(logs, pod, container, instance)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return inspect.Log{}, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.Resource + "/" + v1alpha1.LogSubresource}, err.Error())
	case err != nil:
		return inspect.Log{}, apierrors.NewBadRequest(err.Error())
	}
	return l, nil
}

// distinct lists the non-empty values of key over logs, in order of first appearance.
func distinct(logs []inspect.Log, key func(inspect.Log) string) []string {
	var out []string
	for _, l := range logs {
		if k := key(l); k != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// lastPrevious is the highest previous-N instance recorded for the container: the run before its
// last, as pods/log's previous means.
func lastPrevious(logs []inspect.Log, pod, container string) string {
	best, bestN := "", int64(-1)
	for _, l := range logs {
		if (l.Pod != pod && l.PodUID != pod) || l.Container != container {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(l.Instance, "previous-"), 10, 64)
		if err == nil && strings.HasPrefix(l.Instance, "previous-") && n > bestN {
			best, bestN = l.Instance, n
		}
	}
	return best
}

// logStream streams one archived log (rest.ResourceStreamer). It is a runtime.Object only to pass
// through the generic handlers, as pods/log's LocationStreamer is.
type logStream struct {
	store objstore.Store
	log   inspect.Log
	tail  *int64
	limit *int64
	// gzip: the client accepts gzip and wants the whole log: the stored object goes as it lies,
	// with Content-Encoding gzip in header, if it is one gzip member (oneMember).
	gzip bool
	// whole: the options ask for all of the log's bytes, so the answer's length is known (its
	// recorded size) and is sent, so that a stream cut short (the store failing after the
	// response started) is an error at the client, not a shorter log: the handler that streams
	// it (responsewriters.StreamObject) ignores the copy's error and ends the response cleanly.
	whole  bool
	header http.Header
}

var _ rest.ResourceStreamer = (*logStream)(nil)

func (s *logStream) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *logStream) DeepCopyObject() runtime.Object {
	panic("apiserver.logStream does not implement DeepCopyObject")
}

// InputStream returns the stored gzip object when it may go as it lies (s.gzip, one member: read
// before the response starts, so that a store that fails is an error status), or starts copying
// the decompressed log into a pipe and returns its reading end. A read error of the store after
// the response has started ends the stream early; it is logged, and the client sees a response
// shorter than its Content-Length (the whole log) or, for a part of it, a cut-off response.
func (s *logStream) InputStream(ctx context.Context, _, _ string) (io.ReadCloser, bool, string, error) {
	if s.gzip {
		object, ok, err := s.oneMember(ctx)
		if err != nil {
			return nil, false, "", internal(err)
		}
		if ok {
			s.header.Set("Content-Encoding", "gzip")
			return io.NopCloser(bytes.NewReader(object)), false, "text/plain", nil
		}
	}
	if s.whole && s.log.Bytes > 0 {
		s.header.Set("Content-Length", strconv.FormatInt(s.log.Bytes, 10))
	}
	pr, pw := io.Pipe()
	go func() {
		err := s.copy(ctx, pw)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Streaming an archived log failed", "key", s.log.Key)
		}
		pw.CloseWithError(err)
	}()
	return pr, false, "text/plain", nil
}

// oneMemberMax bounds the stored size of a log that oneMember reads to check it.
const oneMemberMax = 64 << 10

// oneMember returns the log's stored object when it is one gzip member, the only shape every
// client that accepts gzip reads whole. RFC 1952 allows several members back to back, and the
// archive's logs are made of many (the capture compresses each 32 KiB of output as a member, and
// a log over a segment is composed from segments), but curl fails on a second member ("Multi-
// member gzip response not supported", curl/curl#22156) and browsers and OkHttp stop after the
// first, showing a log cut short. A member's end is found only by inflating it, so the check reads
// objects of at most oneMemberMax bytes, whole; ok is false for every other (sent decompressed).
func (s *logStream) oneMember(ctx context.Context) (object []byte, ok bool, err error) {
	if s.log.StoredBytes > oneMemberMax {
		return nil, false, nil
	}
	rc, err := s.store.Get(ctx, s.log.Key)
	if err != nil {
		return nil, false, fmt.Errorf("open the log %s: %w", s.log.Key, err)
	}
	defer rc.Close()
	if object, err = io.ReadAll(io.LimitReader(rc, oneMemberMax+1)); err != nil {
		return nil, false, fmt.Errorf("read the log %s: %w", s.log.Key, err)
	}
	return object, len(object) <= oneMemberMax && isOneMember(object), nil
}

// isOneMember reports whether b is exactly one valid gzip member. A bytes.Reader is an
// io.ByteReader, so the gzip reader stops at the member's end without reading ahead.
func isOneMember(b []byte) bool {
	r := bytes.NewReader(b)
	zr, err := gzip.NewReader(r)
	if err != nil {
		return false
	}
	zr.Multistream(false)
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return false
	}
	return r.Len() == 0
}

// copy writes the log to w: all of it, or its last s.tail lines, at most s.limit bytes.
func (s *logStream) copy(ctx context.Context, w io.Writer) error {
	var skip int64
	if s.tail != nil {
		// Two passes keep memory flat for any line length: count the lines, then skip all but
		// the last ones.
		c := &lineCounter{}
		if err := inspect.Cat(ctx, s.store, s.log.Key, c); err != nil {
			return err
		}
		skip = max(c.lines()-*s.tail, 0)
	}
	out := w
	if s.limit != nil {
		out = &limitWriter{w: w, left: *s.limit}
	}
	if skip > 0 {
		out = &lineSkipper{w: out, skip: skip}
	}
	err := inspect.Cat(ctx, s.store, s.log.Key, out)
	if errors.Is(err, errLimitReached) {
		return nil
	}
	return err
}

// lineCounter counts the lines written to it; a last line without newline counts.
type lineCounter struct {
	newlines int64
	last     byte
	any      bool
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		c.newlines += int64(bytes.Count(p, []byte{'\n'}))
		c.last, c.any = p[len(p)-1], true
	}
	return len(p), nil
}

func (c *lineCounter) lines() int64 {
	if c.any && c.last != '\n' {
		return c.newlines + 1
	}
	return c.newlines
}

// lineSkipper drops the first skip lines written to it and passes the rest on.
type lineSkipper struct {
	w    io.Writer
	skip int64
}

func (s *lineSkipper) Write(p []byte) (int, error) {
	n := len(p)
	for s.skip > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return n, nil
		}
		p, s.skip = p[i+1:], s.skip-1
	}
	if len(p) == 0 {
		return n, nil
	}
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// errLimitReached stops the copy once limitBytes were written.
var errLimitReached = errors.New("limitBytes reached")

// limitWriter passes on at most left bytes, then fails with errLimitReached.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errLimitReached
	}
	cut := p
	if int64(len(cut)) > l.left {
		cut = cut[:l.left]
	}
	n, err := l.w.Write(cut)
	l.left -= int64(n)
	if err != nil {
		return n, err
	}
	if len(cut) < len(p) {
		return n, errLimitReached
	}
	return n, nil
}
