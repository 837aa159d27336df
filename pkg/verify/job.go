package verify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// JobRecords is what Job reads of the database (implemented by *db.DB): what lists a job's logs,
// and its gaps.
type JobRecords interface {
	inspect.Records
	Gaps(ctx context.Context, jobUID string) ([]record.Gap, error)
}

// JobReport is the outcome of Job.
type JobReport struct {
	Job          archive.JobRef      `json:"job"`
	ArchiveState record.ArchiveState `json:"archiveState"`
	// Location is the job's archive directory, as recorded (or, for a job not archived yet, where
	// its logs are).
	Location string `json:"location"`
	// Logs counts the log records; Stored those re-read (state stored), Unavailable those recorded
	// as unavailable (nothing to read: the record says why).
	Logs        int `json:"logs"`
	Stored      int `json:"stored"`
	Unavailable int `json:"unavailable"`
	// Result holds everything found wrong, in the order of the records.
	Result
	// Unreferenced lists objects under the job's directory that no record names: not a failure
	// (the records are authoritative), but worth a look; e.g. an upload whose record a crash lost,
	// later redone under the same key, leaves none, while a foreign object does.
	Unreferenced []string `json:"unreferenced"`
	// Gaps lists what the records say is missing from the logs, and why: not a failure of the
	// archive (it says what it lacks), reported apart from findings.
	Gaps []archive.GapEntry `json:"gaps"`
}

// WriteText prints the report for people: one line per finding (its kind in capitals), then a
// summary.
func (r JobReport) WriteText(w io.Writer) error {
	var b strings.Builder
	r.writeFindings(&b, func(k Kind) string { return strings.ToUpper(string(k)) })
	for _, g := range r.Gaps {
		fmt.Fprintf(&b, "GAP log of container %s run %d of pod uid %s: missing output%s%s: %s\n", g.Container, g.Run, g.PodUID,
			timeBound(" after ", g.After), timeBound(" before ", g.Before), g.Reason)
	}
	for _, k := range r.Unreferenced {
		fmt.Fprintf(&b, "NOTE unreferenced object [%s]: no record names it\n", k)
	}
	if r.ArchiveState == record.ArchivePending {
		b.WriteString("NOTE the job is not archived yet: job.json and manifest.json are not checked\n")
	}
	verdict := "OK"
	if !r.OK() {
		verdict = fmt.Sprintf("FAILED: %d problem(s)", len(r.Findings))
	}
	fmt.Fprintf(&b, "%s %s/%s (uid %s, %s) at %s: %d log(s), %d stored and re-read, %d unavailable\n",
		verdict, r.Job.Namespace, r.Job.Name, r.Job.UID, r.ArchiveState, r.Location, r.Logs, r.Stored, r.Unavailable)
	_, err := io.WriteString(w, b.String())
	return err
}

// verifyWorkers bounds the objects re-read at once: enough to hide the store's latency, few enough
// that an audit never competes with the archiver for bandwidth.
const verifyWorkers = 4

// LocationError says that the records put a job's archive somewhere else than the store or
// prefix the caller named: a mistake in the command line, not a problem of the archive.
type LocationError struct {
	Job archive.JobRef
	// Recorded is where the records say the archive is (its job directory as a URL).
	Recorded string
	// Named says what the caller named instead, for people: a store URL or a prefix.
	Named string
}

func (e *LocationError) Error() string {
	return fmt.Sprintf("job %s/%s (uid %s) was archived under %s, but %s", e.Job.Namespace, e.Job.Name, e.Job.UID, e.Recorded, e.Named)
}

// JobOptions tune Job.
type JobOptions struct {
	// Prefix, when not nil, is the key prefix the caller expects the archive under (its
	// --store-prefix). An archive recorded under another prefix is then a *LocationError; when
	// nil, the prefix is taken from the records.
	Prefix *string
}

// Job re-reads every stored object of a job's archive and compares it with the database: each
// log object is decompressed and its size and sha256 compared with its record (and its stored size
// with the object's); once the job is archived or released, job.json must name the job and
// manifest.json must list exactly the recorded pods and logs, and the stream index beside each log
// must hold what manifest.json says.
//
// The archive is located from the records: job.json, manifest.json and the job's directory from
// the recorded archive location, each log from its recorded key. If the location is in another
// store than store, or under another prefix than opts.Prefix, Job reads nothing and returns a
// *LocationError: a wrong command line must never look like missing objects.
//
// Job does not stop at the first finding: every one is in the report. The error is for failures
// to verify at all: the database failing, the context ending, a *LocationError, or a job the
// database does not know (matching db.ErrNotFound). A store that fails on one object is a finding
// about that object.
func Job(ctx context.Context, records JobRecords, store objstore.Store, jobUID string, opts JobOptions) (JobReport, error) {
	if jobUID == "" {
		return JobReport{}, errors.New("verify: empty job UID")
	}
	job, jobErr := records.Job(ctx, jobUID)
	if jobErr != nil && !errors.Is(jobErr, db.ErrNotFound) {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, jobErr)
	}
	pods, err := records.Pods(ctx, jobUID)
	if err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}
	if jobErr != nil && len(pods) == 0 {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, jobErr)
	}
	logs, err := records.LogObjects(ctx, jobUID)
	if err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}
	gaps, err := records.Gaps(ctx, jobUID)
	if err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}

	rep := &JobReport{Logs: len(logs), Result: Result{Findings: []Finding{}}, Unreferenced: []string{},
		Gaps: archive.BuildManifest(archive.JobRef{}, record.Job{}, nil, nil, gaps, "", time.Time{}).Gaps}
	if jobErr != nil {
		// Pods are recorded before their job (pods has no foreign key to jobs); without the job's
		// row its name, and so its directory, job.json and manifest.json, are unknown.
		rep.Job = archive.JobRef{Namespace: pods[0].Namespace, UID: jobUID}
		rep.ArchiveState = record.ArchivePending
		rep.Findings = append(rep.Findings, Finding{Kind: Record, Item: "job",
			Detail: "the database has pods of the job but no row for the job itself; only the logs are checked"})
	} else {
		rep.Job = archive.JobRef{Namespace: job.Namespace, Name: job.Name, UID: job.UID}
		if err := rep.Job.Validate(); err != nil {
			// The layout names no directory for it (nothing jobvault wrote can be there).
			return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
		}
		rep.ArchiveState = cmp.Or(job.ArchiveState, record.ArchivePending)
	}
	layout, err := locate(store, rep.Job, job.ArchiveLocation, logs, opts)
	if err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}
	v := &jobVerifier{store: store, layout: layout, podNames: map[string]string{}}
	for _, p := range pods {
		v.podNames[p.UID] = p.Name
	}
	if jobErr == nil {
		dir, _ := layout.JobDir(rep.Job) // validated above
		rep.Location = store.URL(dir + "/")
	}

	logProblems, err := v.checkLogs(ctx, logs)
	if err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}
	rep.Findings = append(rep.Findings, logProblems...)
	for _, l := range logs {
		if l.State == record.LogStored {
			rep.Stored++
		} else {
			rep.Unavailable++
		}
	}

	if jobErr == nil && rep.ArchiveState != record.ArchivePending {
		rep.Findings = append(rep.Findings, v.checkJobObject(ctx, rep.Job)...)
		rep.Findings = append(rep.Findings, v.checkManifest(ctx, rep.Job, job, pods, logs, gaps)...)
	}
	if jobErr == nil {
		unref, problem := v.unreferenced(ctx, rep.Job, logs)
		rep.Unreferenced = append(rep.Unreferenced, unref...)
		if problem != nil {
			rep.Findings = append(rep.Findings, *problem)
		}
	}
	if err := ctx.Err(); err != nil {
		return JobReport{}, fmt.Errorf("verify job %s: %w", jobUID, err)
	}
	return *rep, nil
}

func must(b []byte, _ error) []byte { return b }

func timeBound(prefix string, t *time.Time) string {
	if t == nil {
		return ""
	}
	return prefix + t.Format(time.RFC3339Nano)
}

// locate returns the layout the job's archive was written in: from the recorded location, or
// for a job not archived yet from its stored logs' keys, or else opts.Prefix (nothing is stored
// where a layout matters). It fails with a *LocationError when the record places the archive in
// another store or under another prefix than the caller named.
func locate(store objstore.Store, ref archive.JobRef, location string, logs []record.LogObject, opts JobOptions) (archive.Layout, error) {
	var (
		layout archive.Layout
		found  bool
	)
	if location != "" {
		base := strings.TrimSuffix(store.URL(""), "/") + "/"
		dir, ok := strings.CutPrefix(location, base)
		if !ok {
			return layout, &LocationError{Job: ref, Recorded: location,
				Named: fmt.Sprintf("the --store-* flags name %s (check --store-backend and its bucket or root)", base)}
		}
		if layout, found = archive.LayoutOf(ref, strings.TrimSuffix(dir, "/")); !found {
			return layout, fmt.Errorf("the recorded archive location %s is not a directory of job %s/%s", location, ref.Namespace, ref.Name)
		}
	} else {
		for _, l := range logs {
			if l.State == record.LogStored {
				location = store.URL(archive.JobDirOfLog(l.ObjectKey) + "/")
				layout, found = archive.LayoutOf(ref, archive.JobDirOfLog(l.ObjectKey))
				break
			}
		}
	}
	switch {
	case opts.Prefix == nil:
	case !found:
		layout.Prefix = *opts.Prefix
	case strings.Trim(*opts.Prefix, "/") != layout.Prefix:
		return layout, &LocationError{Job: ref, Recorded: location, Named: fmt.Sprintf("--store-prefix is %q", *opts.Prefix)}
	}
	return layout, nil
}

type jobVerifier struct {
	store    objstore.Store
	layout   archive.Layout
	podNames map[string]string
}

func (v *jobVerifier) logSubject(l record.LogObject) string {
	return fmt.Sprintf("log of container %s (%s) of pod %s (uid %s)", l.Container, l.Instance, v.podNames[l.PodUID], l.PodUID)
}

// checkLogs re-reads every stored log, verifyWorkers at a time, and returns the problems in the
// order of logs.
func (v *jobVerifier) checkLogs(ctx context.Context, logs []record.LogObject) ([]Finding, error) {
	results := make([]*Finding, len(logs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(verifyWorkers, len(logs)) {
		wg.Go(func() {
			for i := range work {
				results[i] = v.checkLog(ctx, logs[i])
			}
		})
	}
feed:
	for i, l := range logs {
		if l.State != record.LogStored {
			continue
		}
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var problems []Finding
	for _, p := range results {
		if p != nil {
			problems = append(problems, *p)
		}
	}
	return problems, nil
}

// checkLog streams one log object through gunzip and sha256 (as the seal hashes it) and compares
// it with its record.
func (v *jobVerifier) checkLog(ctx context.Context, l record.LogObject) *Finding {
	finding := func(kind Kind, format string, args ...any) *Finding {
		return &Finding{Kind: kind, Item: v.logSubject(l), Key: l.ObjectKey, Detail: fmt.Sprintf(format, args...)}
	}
	h, err := audit.HashObject(ctx, v.store, l.ObjectKey, true)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return finding(Missing, "no object under the recorded key")
	case err != nil:
		return finding(Unreadable, "%v", err)
	case h.ContentErr != nil && h.NotGzip:
		return finding(Corrupt, "not a gzip stream: %v", h.ContentErr)
	case h.ContentErr != nil:
		return finding(Corrupt, "decompress after %d bytes: %v", h.ContentBytes, h.ContentErr)
	}
	var diffs []string
	if h.ContentBytes != l.Bytes {
		diffs = append(diffs, fmt.Sprintf("uncompressed size is %d bytes, the record says %d", h.ContentBytes, l.Bytes))
	}
	if h.ContentSHA256 != l.SHA256 {
		diffs = append(diffs, fmt.Sprintf("sha256 is %s, the record says %s", h.ContentSHA256, l.SHA256))
	}
	if h.Bytes != l.StoredBytes {
		diffs = append(diffs, fmt.Sprintf("stored size is %d bytes, the record says %d", h.Bytes, l.StoredBytes))
	}
	if len(diffs) > 0 {
		return finding(Mismatch, "%s", strings.Join(diffs, "; "))
	}
	return nil
}

// getJSON reads the JSON object under key into v, or returns the finding. The object is read
// whole before it is decoded, so that a store failing mid-read is told apart from a corrupt object.
func (v *jobVerifier) getJSON(ctx context.Context, subject, key string, into any) *Finding {
	rc, err := v.store.Get(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return &Finding{Kind: Missing, Item: subject, Key: key, Detail: "no object, although the job is archived"}
	case err != nil:
		return &Finding{Kind: Unreadable, Item: subject, Key: key, Detail: err.Error()}
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return &Finding{Kind: Unreadable, Item: subject, Key: key, Detail: err.Error()}
	}
	// Decode, not Unmarshal: what follows the first JSON value is not the object's concern.
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(into); err != nil {
		return &Finding{Kind: Corrupt, Item: subject, Key: key, Detail: "not JSON: " + err.Error()}
	}
	return nil
}

// checkJobObject checks that job.json exists and is the final object of this job.
func (v *jobVerifier) checkJobObject(ctx context.Context, ref archive.JobRef) []Finding {
	key, _ := v.layout.JobObject(ref) // validated by Job
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			UID       string `json:"uid"`
		} `json:"metadata"`
	}
	if p := v.getJSON(ctx, "job.json", key, &obj); p != nil {
		return []Finding{*p}
	}
	got := archive.JobRef{Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name, UID: obj.Metadata.UID}
	if got != ref || obj.Kind != "Job" {
		return []Finding{{Kind: Mismatch, Item: "job.json", Key: key,
			Detail: fmt.Sprintf("holds %s %s/%s (uid %s), not the job %s/%s (uid %s)",
				cmp.Or(obj.Kind, "-"), got.Namespace, got.Name, got.UID, ref.Namespace, ref.Name, ref.UID)}}
	}
	return nil
}

// checkManifest compares manifest.json with the records it was built from. Only what cannot change
// after the job is archived is compared: the job's identity and release reason, each pod's name,
// task and release reason, and every log entry in full. Not the phases, nodes or times: pod rows
// are still updated while the pods terminate, and a job an operator released keeps running.
func (v *jobVerifier) checkManifest(ctx context.Context, ref archive.JobRef, job record.Job, pods []record.Pod, logs []record.LogObject, gaps []record.Gap) []Finding {
	key, _ := v.layout.Manifest(ref) // validated by Job
	var got archive.Manifest
	if p := v.getJSON(ctx, "manifest.json", key, &got); p != nil {
		return []Finding{*p}
	}
	var problems []Finding
	add := func(format string, args ...any) {
		problems = append(problems, Finding{Kind: Manifest, Item: "manifest.json", Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	object, _ := v.layout.JobObject(ref) // validated by Job
	want := archive.BuildManifest(ref, job, pods, logs, gaps, object, got.ArchivedAt)
	if gotGaps, _ := json.Marshal(got.Gaps); len(got.Gaps)+len(want.Gaps) > 0 && !bytes.Equal(gotGaps, must(json.Marshal(want.Gaps))) {
		add("lists %d gap(s), the database %d, or they differ", len(got.Gaps), len(want.Gaps))
	}
	if got.Version != want.Version {
		add("format version %d, this tool reads version %d", got.Version, want.Version)
	}
	if got.Job != want.Job {
		add("names job %s/%s (uid %s), not %s/%s (uid %s)", got.Job.Namespace, got.Job.Name, got.Job.UID, ref.Namespace, ref.Name, ref.UID)
	}
	if got.JobObject != want.JobObject {
		add("jobObject is %q, expected %q", got.JobObject, want.JobObject)
	}
	if got.ReleaseReason != want.ReleaseReason {
		add("release reason is %q, the database says %q", got.ReleaseReason, want.ReleaseReason)
	}

	gotPods := map[string]archive.PodEntry{}
	for _, p := range got.Pods {
		gotPods[p.UID] = p
	}
	wantPods := map[string]bool{}
	for _, wp := range want.Pods {
		wantPods[wp.UID] = true
		gp, ok := gotPods[wp.UID]
		if !ok {
			add("pod %s (uid %s) is recorded in the database but not listed", wp.Name, wp.UID)
			continue
		}
		if gp.Name != wp.Name || gp.Task != wp.Task || gp.ReleaseReason != wp.ReleaseReason {
			add("pod uid %s is listed as name %q, task %q, release reason %q; the database says %q, %q, %q",
				wp.UID, gp.Name, gp.Task, gp.ReleaseReason, wp.Name, wp.Task, wp.ReleaseReason)
		}
		gotLogs := map[string]archive.LogEntry{}
		for _, l := range gp.Logs {
			gotLogs[l.Container+"/"+l.Instance] = l
		}
		for _, wl := range wp.Logs {
			id := wl.Container + "/" + wl.Instance
			gl, ok := gotLogs[id]
			if !ok {
				add("log of container %s (%s) of pod %s is recorded in the database but not listed", wl.Container, wl.Instance, wp.Name)
				continue
			}
			delete(gotLogs, id)
			if d := diffLogEntry(gl, wl); d != "" {
				add("log of container %s (%s) of pod %s differs from the database: %s", wl.Container, wl.Instance, wp.Name, d)
			}
		}
		for _, gl := range gp.Logs {
			if _, extra := gotLogs[gl.Container+"/"+gl.Instance]; extra {
				add("log of container %s (%s) of pod %s is listed but not recorded in the database", gl.Container, gl.Instance, wp.Name)
			}
		}
	}
	for _, gp := range got.Pods {
		if !wantPods[gp.UID] {
			add("pod %s (uid %s) is listed but not recorded in the database", gp.Name, gp.UID)
		}
	}
	return append(problems, v.checkStreams(ctx, got, logs)...)
}

// checkStreams re-reads the stream index of each stored log that manifest.json lists (the node
// agent's, beside its log: no row records it, the seal hashed it into the manifest) and compares
// its size and sha256 with the manifest's.
func (v *jobVerifier) checkStreams(ctx context.Context, got archive.Manifest, logs []record.LogObject) []Finding {
	byIndex := map[string]record.LogObject{}
	for _, l := range logs {
		if l.State == record.LogStored && l.ObjectKey != "" {
			byIndex[l.ObjectKey+archive.StreamsSuffix] = l
		}
	}
	var problems []Finding
	for _, o := range got.Objects {
		if l, ok := byIndex[o.Key]; ok {
			if p := v.checkStreamsObject(ctx, l, o); p != nil {
				problems = append(problems, *p)
			}
		}
	}
	return problems
}

// checkStreamsObject hashes the stream index o of the log l and compares it with o.
func (v *jobVerifier) checkStreamsObject(ctx context.Context, l record.LogObject, o archive.ObjectEntry) *Finding {
	finding := func(kind Kind, format string, args ...any) *Finding {
		return &Finding{Kind: kind, Item: "stream index of the " + v.logSubject(l), Key: o.Key, Detail: fmt.Sprintf(format, args...)}
	}
	h, err := audit.HashObject(ctx, v.store, o.Key, false) // as the seal hashed it
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return finding(Missing, "no object under the key manifest.json lists")
	case err != nil:
		return finding(Unreadable, "%v", err)
	case h.Bytes != o.Bytes || h.SHA256 != o.SHA256:
		return finding(Mismatch, "%d bytes with sha256 %s, manifest.json says %d bytes with %s", h.Bytes, h.SHA256, o.Bytes, o.SHA256)
	}
	return nil
}

// diffLogEntry describes how a manifest's log entry differs from the database's, "" if it does not.
func diffLogEntry(got, want archive.LogEntry) string {
	var diffs []string
	field := func(name string, g, w any) {
		if g != w {
			diffs = append(diffs, fmt.Sprintf("%s %v (database: %v)", name, g, w))
		}
	}
	field("type", got.Type, want.Type)
	field("state", got.State, want.State)
	field("key", got.Key, want.Key)
	field("bytes", got.Bytes, want.Bytes)
	field("storedBytes", got.StoredBytes, want.StoredBytes)
	field("sha256", got.SHA256, want.SHA256)
	field("reason", got.Reason, want.Reason)
	return strings.Join(diffs, ", ")
}

// unreferenced lists the objects under the job's directory that no record names.
func (v *jobVerifier) unreferenced(ctx context.Context, ref archive.JobRef, logs []record.LogObject) ([]string, *Finding) {
	// ref was validated by Job.
	object, _ := v.layout.JobObject(ref)
	manifest, _ := v.layout.Manifest(ref)
	dir, _ := v.layout.JobDir(ref)
	known := map[string]bool{object: true, manifest: true}
	for _, l := range logs {
		if l.ObjectKey != "" {
			// A log's stream index is beside it (checkStreams checks it against manifest.json).
			known[l.ObjectKey], known[l.ObjectKey+archive.StreamsSuffix] = true, true
		}
	}
	var keys []string
	err := v.store.List(ctx, dir+"/", func(o objstore.ObjectInfo) error {
		if !known[o.Key] {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		return keys, &Finding{Kind: Unreadable, Item: "job directory", Key: dir, Detail: "list: " + err.Error()}
	}
	return keys, nil
}
