package plugin

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// TestGuardNeedsHostAndToken: only the printed URL's token, then its cookie, on the viewer's own
// host, reaches the pages.
func TestGuardNeedsHostAndToken(t *testing.T) {
	h := guard(8080, "s3cret", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page")) }))
	serve := func(host, target string, cookie *http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Host = host
		if cookie != nil {
			r.AddCookie(cookie)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := serve("127.0.0.1:8080", "/jobs", nil); w.Code != http.StatusForbidden {
		t.Errorf("no token: %d, want 403", w.Code)
	}
	if w := serve("127.0.0.1:8080", "/jobs?token=wrong", nil); w.Code != http.StatusForbidden {
		t.Errorf("a wrong token: %d, want 403", w.Code)
	}
	if w := serve("evil.example:8080", "/jobs?token=s3cret", nil); w.Code != http.StatusForbidden {
		t.Errorf("another host (DNS rebinding): %d, want 403", w.Code)
	}
	w := serve("127.0.0.1:8080", "/jobs?namespace=a&token=s3cret", nil)
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/jobs?namespace=a" || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Fatalf("the token: %d to %q with cookies %v, want a redirect without the token setting an HttpOnly cookie", w.Code, w.Header().Get("Location"), cookies)
	}
	if w := serve("localhost:8080", "/jobs", cookies[0]); w.Code != http.StatusOK || w.Body.String() != "page" {
		t.Errorf("the cookie: %d %q, want the page", w.Code, w.Body.String())
	}
	if w := serve("127.0.0.1:8080", "/jobs", &http.Cookie{Name: uiCookie, Value: "guess"}); w.Code != http.StatusForbidden {
		t.Errorf("a wrong cookie: %d, want 403", w.Code)
	}
}

// TestLogViewBounded: a line longer than uiMaxLineBytes is cut, invalid UTF-8 is replaced, CRLF
// ends a line, and a search keeps only its lines, numbered as in the log.
func TestLogViewBounded(t *testing.T) {
	long := strings.Repeat("x", 3*uiMaxLineBytes)
	in := "first\r\n" + long + "\nbad \xff byte\nneedle here and needle there\nlast without newline"
	var all logView
	if err := all.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if len(all.Lines) != 5 {
		t.Fatalf("read %d lines, want 5", len(all.Lines))
	}
	if got := all.Lines[0].Parts[0].Text; got != "first" {
		t.Errorf("line 1 = %q, want first", got)
	}
	if got := all.Lines[1]; len(got.Parts[0].Text) != uiMaxLineBytes || !got.Truncated {
		t.Errorf("the long line kept %d bytes (cut %v), want %d and cut", len(got.Parts[0].Text), got.Truncated, uiMaxLineBytes)
	}
	if got := all.Lines[2].Parts[0].Text; got != "bad \uFFFD byte" {
		t.Errorf("line 3 = %q, want the invalid byte replaced", got)
	}
	if got := all.Lines[4]; got.Parts[0].Text != "last without newline" || got.Truncated {
		t.Errorf("line 5 = %+v, want the last line whole", got)
	}
	found := logView{Search: "needle"}
	if err := found.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if found.Matches != 1 || len(found.Lines) != 1 || found.Lines[0].Num != 4 || len(found.Lines[0].Parts) != 4 || !found.Lines[0].Parts[0].Hit {
		t.Errorf("search: %d matches, lines %+v, want line 4 with its two hits", found.Matches, found.Lines)
	}
}

// TestGapsPlaced: gaps fall before the first line (from the run's start), between the stamped
// lines around them, after the last (to the run's end), and unstamped lines leave a gap between
// two times unplaced.
func TestGapsPlaced(t *testing.T) {
	at := func(s int) *metav1.Time { m := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC)); return &m }
	var stamped strings.Builder
	for s := 1; s <= 4; s++ {
		stamped.WriteString(at(s).UTC().Format(time.RFC3339) + " line\n")
	}
	gaps := []v1alpha1.LogGap{{Reason: "collected", Before: at(1)}, {Reason: "node lost", After: at(2), Before: at(3)}, {Reason: "rotated", After: at(4)}}
	lv := logView{}
	if err := lv.read(strings.NewReader(stamped.String())); err != nil {
		t.Fatal(err)
	}
	if unplaced := placeGaps(&lv, gaps, true); len(unplaced) != 0 {
		t.Errorf("unplaced %v, want every gap placed", unplaced)
	}
	var got []string
	for _, l := range lv.Lines {
		if l.Gap != nil {
			got = append(got, l.Gap.Reason)
		} else {
			got = append(got, l.Parts[0].Text[17:19])
		}
	}
	if want := "collected 01 02 node lost 03 04 rotated"; strings.Join(got, " ") != want {
		t.Errorf("placed %q, want %q", strings.Join(got, " "), want)
	}
	plain := logView{}
	if err := plain.read(bufio.NewReader(strings.NewReader("a\nb\n"))); err != nil {
		t.Fatal(err)
	}
	if unplaced := placeGaps(&plain, gaps[1:2], true); len(unplaced) != 1 || len(plain.Lines) != 2 {
		t.Errorf("unstamped lines: %d unplaced, %d rows, want the gap unplaced", len(unplaced), len(plain.Lines))
	}
	// A tail that does not start where the log does cannot place a gap from the run's start.
	tail := logView{Tail: 1}
	if err := tail.read(strings.NewReader("z\n")); err != nil {
		t.Fatal(err)
	}
	if unplaced := placeGaps(&tail, gaps[:1], false); len(unplaced) != 1 {
		t.Errorf("a gap from the start above a tail: %d unplaced, want it listed", len(unplaced))
	}
}

// TestTimelineOrdered: phases lie left to right in order, each at least timelineMinPhase wide,
// within the picture.
func TestTimelineOrdered(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := &v1alpha1.ArchivedJob{Status: v1alpha1.ArchivedJobStatus{FinishedAt: &metav1.Time{Time: t0.Add(time.Hour)},
		Transitions: []v1alpha1.PhaseTransition{{Phase: "Pending", Time: metav1.NewTime(t0)}, {Phase: "Running", Time: metav1.NewTime(t0.Add(time.Minute))},
			{Phase: "Completed", Time: metav1.NewTime(t0.Add(time.Hour))}}}}
	tl := timelineOf(job, t0.Add(2*time.Hour))
	x := 0
	for _, s := range tl.Segments {
		if s.X != x || s.Width < timelineMinPhase {
			t.Errorf("segment %s at %d, %d wide; want at %d, at least %d wide", s.Phase, s.X, s.Width, x, timelineMinPhase)
		}
		x += s.Width
	}
	if x > timelineWidth || tl.Segments[1].Width <= tl.Segments[0].Width {
		t.Errorf("segments %+v: want Running (59m) wider than Pending (1m), within %d", tl.Segments, timelineWidth)
	}
}

// TestLineOfExactlyTheBound: a line of uiMaxLineBytes is whole, not cut.
func TestLineOfExactlyTheBound(t *testing.T) {
	line := strings.Repeat("y", uiMaxLineBytes)
	text, cut, n, err := readLine(bufio.NewReaderSize(strings.NewReader(line+"\r\nnext\n"), 16))
	if err != nil || text != line || cut || n != int64(len(line)+2) {
		t.Errorf("readLine: %d bytes, cut %v, took %d, %v; want the %d bytes whole, %d taken", len(text), cut, n, err, len(line), len(line)+2)
	}
}

// TestJobsPageAsksTheAPI: the list page's filter becomes the API's field selector and page
// options, and a refusal of the API shows its Status message with its code.
func TestJobsPageAsksTheAPI(t *testing.T) {
	var asked []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "/namespaces/b/") {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"archivedjobs is forbidden: User \"ann\" cannot list"}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"ArchivedJobList","apiVersion":"archive.jobvault.io/v1alpha1","metadata":{"continue":"k2"},"items":[{"metadata":{"name":"train-<1>","namespace":"a","uid":"u1"},"spec":{"submitter":"alice"},"status":{"phase":"Failed"}}]}`))
	}))
	defer api.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	v, err := newViewer(&client{rest: cs.RESTClient(), namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	page := func(target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		v.routes().ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		return w
	}
	w := page("/jobs?namespace=a&submitter=alice&phase=Failed&before=2026-11-20&limit=10&continue=k1")
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(body, "train-&lt;1&gt;") || !strings.Contains(body, `href="/jobs/a/u1"`) ||
		!strings.Contains(body, "continue=k2") {
		t.Errorf("list page: %d\n%s\nwant the job escaped, linked by UID, and the next page", w.Code, body)
	}
	q, _ := url.ParseQuery(strings.SplitN(asked[0], "?", 2)[1])
	sel := q.Get("fieldSelector")
	for _, want := range []string{"spec.submitter=alice", "status.phase=Failed", "createdBefore=2026-11-20T00:00:00Z"} {
		if !strings.Contains(sel, want) {
			t.Errorf("field selector %q lacks %q", sel, want)
		}
	}
	if q.Get("limit") != "10" || q.Get("continue") != "k1" {
		t.Errorf("asked %s, want limit=10 and continue=k1", asked[0])
	}
	w = page("/jobs?namespace=b")
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), `Error from server (Forbidden): <span id="refusal-message">archivedjobs is forbidden: User &#34;ann&#34; cannot list</span>`) {
		t.Errorf("refused list page: %d\n%s\nwant 403 with the Status message", w.Code, w.Body.String())
	}
	if w := page("/jobs?before=yesterday"); w.Code != http.StatusBadRequest {
		t.Errorf("a bad time bound: %d, want 400", w.Code)
	}
}
