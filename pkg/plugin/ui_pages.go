package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// uiPageSize is the jobs a list page shows unless its limit says otherwise; uiMaxPageSize bounds
// what a URL may ask.
const (
	uiPageSize    = 50
	uiMaxPageSize = 500
)

// uiFuncs are the templates' helpers.
var uiFuncs = template.FuncMap{
	"ago":  ago,
	"list": func(s ...string) []string { return s },
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
}

// ago is a time as the page shows it: UTC, to the second.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// jobsFilter is the list page's form.
type jobsFilter struct {
	Namespace, Submitter, Phase, State, Since, Before string
	Limit                                             int64
}

func filterOf(q url.Values) (jobsFilter, error) {
	f := jobsFilter{Namespace: q.Get("namespace"), Submitter: q.Get("submitter"), Phase: q.Get("phase"), State: q.Get("state"),
		Since: q.Get("since"), Before: q.Get("before"), Limit: uiPageSize}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil || n < 1 || n > uiMaxPageSize {
			return f, fmt.Errorf("limit %q: a number of jobs from 1 to %d", l, uiMaxPageSize)
		}
		f.Limit = n
	}
	return f, nil
}

// options are the filter as `get jobs` flags.
func (f jobsFilter) options() (getOptions, error) {
	o := getOptions{submitter: f.Submitter, phase: f.Phase, state: f.State}
	if f.Since != "" {
		d, err := parseSince(f.Since)
		if err != nil {
			return o, err
		}
		o.since = d
	}
	return o, nil
}

// parseSince reads a duration as Go writes it, or a number of days (7d).
func parseSince(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("since %q: a duration such as 7d or 36h", s)
	}
	return d, nil
}

// parseBefore reads the upper time bound: a date (its midnight, UTC) or an RFC 3339 time.
func parseBefore(s string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, fmt.Errorf("created before %q: a date such as 2026-11-20, or an RFC 3339 time", s)
	}
	return t.UTC(), nil
}

// jobsPage lists one page of the jobs the filter selects.
func (v *viewer) jobsPage(w http.ResponseWriter, r *http.Request) {
	f, err := filterOf(r.URL.Query())
	if err != nil {
		v.refuse(w, http.StatusBadRequest, err)
		return
	}
	o, err := f.options()
	if err != nil {
		v.refuse(w, http.StatusBadRequest, err)
		return
	}
	req := v.c.request(f.Namespace, v1alpha1.Resource).Param("limit", strconv.FormatInt(f.Limit, 10))
	sel := o.selector(time.Now())
	if f.Before != "" {
		before, err := parseBefore(f.Before)
		if err != nil {
			v.refuse(w, http.StatusBadRequest, err)
			return
		}
		sel = strings.TrimPrefix(sel+","+v1alpha1.FieldCreatedBefore+"="+before.Format(time.RFC3339), ",")
	}
	if sel != "" {
		req.Param("fieldSelector", sel)
	}
	cont := r.URL.Query().Get("continue")
	if cont != "" {
		req.Param("continue", cont)
	}
	var list v1alpha1.ArchivedJobList
	if err := getJSON(r.Context(), req, &list); err != nil {
		v.refuse(w, http.StatusBadGateway, err)
		return
	}
	data := map[string]any{"Title": "Archived jobs", "Filter": f, "Jobs": list.Items, "Paged": cont != ""}
	if list.Continue != "" {
		next := r.URL.Query()
		next.Set("continue", list.Continue)
		data["Next"] = "/jobs?" + next.Encode()
	}
	if cont != "" {
		first := r.URL.Query()
		first.Del("continue")
		data["First"] = "/jobs?" + first.Encode()
	}
	v.render(w, "jobs", data)
}

// jobPage shows one job: its timeline, pods, containers and each log's state.
func (v *viewer) jobPage(w http.ResponseWriter, r *http.Request) {
	job, err := v.job(r)
	if err != nil {
		v.refuse(w, http.StatusBadGateway, err)
		return
	}
	v.render(w, "job", map[string]any{"Title": job.Namespace + "/" + job.Name, "Job": job,
		"Timeline": timelineOf(job, time.Now()), "Pods": podViews(job)})
}

// job reads the job the path names.
func (v *viewer) job(r *http.Request) (*v1alpha1.ArchivedJob, error) {
	var job v1alpha1.ArchivedJob
	err := getJSON(r.Context(), v.c.request(r.PathValue("ns"), v1alpha1.Resource, r.PathValue("name")), &job)
	return &job, err
}

// getJSON decodes the answer of req into into. A refusal is returned with the Status the API
// sent (doRaw).
func getJSON(ctx context.Context, req *rest.Request, into any) error {
	raw, err := doRaw(ctx, req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("decode %T: %w", into, err)
	}
	return nil
}

// logRef names one container run's log, as the log subresource's options do.
type logRef struct{ Pod, Container, Instance string }

func logRefOf(q url.Values) logRef {
	ref := logRef{Pod: q.Get("pod"), Container: q.Get("container"), Instance: q.Get("instance")}
	if ref.Instance == "" {
		ref.Instance = "current"
	}
	return ref
}

// query is the ref as the viewer's and the API's query.
func (l logRef) query() url.Values {
	q := url.Values{"instance": {l.Instance}}
	if l.Pod != "" {
		q.Set("pod", l.Pod)
	}
	if l.Container != "" {
		q.Set("container", l.Container)
	}
	return q
}

// stream opens the log of ref of the job the path names, with extra options (tailLines,
// limitBytes).
func (v *viewer) stream(r *http.Request, ref logRef, extra url.Values) (io.ReadCloser, error) {
	req := v.c.request(r.PathValue("ns"), v1alpha1.Resource, r.PathValue("name"), v1alpha1.LogSubresource)
	for k, vs := range ref.query() {
		req.Param(k, vs[0])
	}
	for k, vs := range extra {
		req.Param(k, vs[0])
	}
	return req.Stream(r.Context())
}

// download sends the whole log as a file.
func (v *viewer) download(w http.ResponseWriter, r *http.Request) {
	ref := logRefOf(r.URL.Query())
	body, err := v.stream(r, ref, nil)
	if err != nil {
		v.refuse(w, http.StatusBadGateway, err)
		return
	}
	defer body.Close()
	name := fileName(r.PathValue("ns"), r.PathValue("name"), ref.Pod, ref.Container, ref.Instance)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	_, _ = io.Copy(w, body) // a broken download shows in the browser; the status is sent
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName is the download's name, of the parts that are set.
func fileName(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, unsafeName.ReplaceAllString(p, "_"))
		}
	}
	return strings.Join(kept, "_") + ".log"
}

// render writes page with data, or a plain error if the template fails (data the API sent
// cannot make it fail: it is escaped, never parsed).
func (v *viewer) render(w http.ResponseWriter, page string, data map[string]any) {
	var b bytes.Buffer
	if err := v.pages[page].Execute(&b, data); err != nil {
		http.Error(w, fmt.Sprintf("render the %s page: %v", page, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if code, ok := data["Code"].(int); ok {
		w.WriteHeader(code)
	}
	_, _ = w.Write(b.Bytes())
}

// refuse shows err: the API's refusal as kubectl prints it (its reason and the Status message)
// with its HTTP code, anything else with code.
func (v *viewer) refuse(w http.ResponseWriter, code int, err error) {
	var status apierrors.APIStatus
	msg, reason := err.Error(), ""
	if errors.As(err, &status) && status.Status().Reason != "" {
		s := status.Status()
		msg, reason, code = s.Message, string(s.Reason), int(s.Code)
	}
	v.render(w, "error", map[string]any{"Title": "Error", "Code": code, "Reason": reason, "Message": msg})
}
