package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/plugin"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// screenshotsEnv names the directory (relative to the module's root) where TestWebViewer saves
// the screenshots of docs/api.md; unset: none are saved.
const screenshotsEnv = "JOBVAULT_UI_SCREENSHOTS"

// TestWebViewer drives `kubectl jobvault ui` in headless Chromium as a user with view in one
// namespace: the job list renders and pages, a job shows its timeline and the gap recorded in its
// log, the log renders with the gap marked between the lines it fell between, a search finds its
// line, the download is the archived bytes, and another namespace shows the API's refusal.
func TestWebViewer(t *testing.T) {
	browser := chromiumPath(t)
	s := stack.NewRig(t, objstore.BackendS3)
	env := s.Env
	ctx := t.Context()
	nsB := env.Namespace(t)

	// The viewed job's lines carry times, so the gap recorded between two of them falls there.
	start := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	stamp := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	var log strings.Builder
	for i := 1; i <= 40; i++ {
		what := "training step"
		if i == 33 {
			what = "loss diverged at step"
		}
		fmt.Fprintf(&log, "%s %s %d\n", stamp(i).Format(time.RFC3339), what, i)
	}
	viewed := testbed.Job(s.NS, "viewed").Task("worker", 1, []string{"main"}).Obj()
	env.SetPodLogs(t, s.NS, testbed.PodName(viewed.Name, "worker", 0), map[string]testbed.ContainerLogs{
		"main": {Current: []testbed.Chunk{{Stream: "stdout", Data: []byte(log.String())}}}})
	other := testbed.Job(s.NS, "viewed-too").Task("worker", 1, []string{"main"}).Obj()
	stack.PodLogs(t, env, s.NS, other.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	for _, job := range []*batchv1alpha1.Job{viewed, other} {
		stack.CreateAs(t, env, "alice", job)
	}
	for _, job := range []*batchv1alpha1.Job{viewed, other} {
		s.WaitArchived(t, job, 3*time.Minute)
	}
	stack.StartAPI(t, s)
	viewer := newReader(t, env, "una-ui-viewer")
	bind(t, env, s.NS, viewer.name, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"})
	waitViewAggregated(t, env)

	// The node was lost between the 20th and the 21st line (recorded as the archiver records it).
	raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", viewed.Name)
	if err != nil {
		t.Fatalf("get %s: %v (%s)", viewed.Name, err, raw)
	}
	var job v1alpha1.ArchivedJob
	mustJSON(t, raw, &job)
	if len(job.Status.Pods) != 1 {
		t.Fatalf("%s has %d pods, want 1", viewed.Name, len(job.Status.Pods))
	}
	// The archiver refuses a gap under a sealed job (db.ErrFinalized), so the row is written as an
	// archiver that recorded it before the seal would have left it.
	stack.PutSealedGap(t, s.DSN, record.Gap{PodUID: job.Status.Pods[0].UID, Container: "main", Run: 0,
		After: stamp(20), Before: stamp(21), Reason: record.GapNodeLost, Detail: "node-1 NotReady for 5m"})

	printed, base := startUI(t, viewer.kubeconfig)
	b := newBrowser(t, browser)
	shots := screenshotDir(t)
	// The printed URL hands the browser the viewer's token; without it every page is refused.
	do(t, b, chromedp.Navigate(base+"/jobs"))
	if refused := get(t, b, chromedp.Text(chromedp.CSS(`body`))); !strings.Contains(refused, "open the URL kubectl jobvault ui printed") {
		t.Errorf("a page opened without the token reads %q, want the viewer's refusal", refused)
	}
	do(t, b, chromedp.Navigate(printed), chromedp.WaitVisible(chromedp.CSS(`header`)))
	jobs := base + "/jobs?namespace=" + url.QueryEscape(s.NS)

	t.Run("the job list renders and pages", func(t *testing.T) {
		do(t, b, chromedp.Navigate(jobs), chromedp.WaitVisible(chromedp.CSS(`#jobs tr.job`)))
		names := get(t, b, chromedp.Text(chromedp.CSS(`#jobs tbody`)))
		if !strings.Contains(names, "viewed") || !strings.Contains(names, "viewed-too") || !strings.Contains(names, "alice") {
			t.Errorf("the job list shows %q, want viewed and viewed-too submitted by alice", names)
		}
		shot(t, b, shots, "ui-jobs.png")
		do(t, b, chromedp.Navigate(jobs+"&limit=1"), chromedp.WaitVisible(chromedp.CSS(`#next`)))
		first := get(t, b, chromedp.AttributeValue(chromedp.CSS(`#jobs tr.job`), "data-name")).Value
		do(t, b, chromedp.Click(chromedp.CSS(`#next`)), chromedp.WaitVisible(chromedp.CSS(`#jobs tr.job:not([data-name="`+first+`"])`)))
		second := get(t, b, chromedp.AttributeValue(chromedp.CSS(`#jobs tr.job`), "data-name")).Value
		if first == second || !strings.HasPrefix(first, "viewed") || !strings.HasPrefix(second, "viewed") {
			t.Errorf("pages of one job showed %q then %q, want viewed and viewed-too", first, second)
		}
	})

	t.Run("a job shows its timeline and its gap", func(t *testing.T) {
		do(t, b, chromedp.Navigate(jobs), chromedp.Click(chromedp.CSS(`#jobs tr.job[data-name="viewed"] a`)),
			chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
		if phases := get(t, b, chromedp.TextContent(chromedp.CSS(`#timeline`))); !strings.Contains(phases, "Completed") {
			t.Errorf("the timeline reads %q, want the phase Completed", phases)
		}
		runs := get(t, b, chromedp.Text(chromedp.CSS(`table.runs`)))
		if !strings.Contains(runs, "gap: node lost (node-1 NotReady for 5m)") || !strings.Contains(runs, "stored") {
			t.Errorf("the pods table reads %q, want the stored log and its gap: node lost", runs)
		}
		shot(t, b, shots, "ui-job.png")
	})

	t.Run("the log renders with its gap where it fell", func(t *testing.T) {
		do(t, b, chromedp.Click(chromedp.CSS(`table.runs a`)), chromedp.WaitVisible(chromedp.CSS(`#log .line`)))
		if lines := get(t, b, chromedp.Evaluate[int](`document.querySelectorAll('#log .line').length`)); lines != 40 {
			t.Errorf("the log shows %d lines, want 40", lines)
		}
		around := get(t, b, chromedp.Evaluate[[]string](`(g => [g.previousElementSibling.querySelector('.t').textContent,
			g.nextElementSibling.querySelector('.t').textContent])(document.querySelector('#log .gap'))`))
		if len(around) != 2 || !strings.HasSuffix(around[0], " 20") || !strings.HasSuffix(around[1], " 21") {
			t.Errorf("the gap falls between %q, want between the 20th and the 21st line", around)
		}
		shot(t, b, shots, "ui-log.png")
		got := get(t, b, chromedp.Evaluate[string](`fetch(document.getElementById('download').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
		if got != log.String() {
			t.Errorf("the download holds %d bytes %q, want the %d archived", len(got), clip([]byte(got)), log.Len())
		}
	})

	t.Run("a search finds its line", func(t *testing.T) {
		do(t, b, chromedp.SetValue(chromedp.CSS(`#search`), "diverged"), chromedp.Submit(chromedp.CSS(`#search`)),
			chromedp.WaitVisible(chromedp.CSS(`#log .line.match`)))
		matches := get(t, b, chromedp.Evaluate[int](`document.querySelectorAll('#log .line.match').length`))
		hit := get(t, b, chromedp.TextContent(chromedp.CSS(`#log .line.match`)))
		if matches != 1 || !strings.HasPrefix(hit, "33") || !strings.Contains(hit, "loss diverged at step 33") {
			t.Errorf("the search shows %d lines, the first %q; want line 33 alone", matches, hit)
		}
		if summary := get(t, b, chromedp.Text(chromedp.CSS(`#summary`))); !strings.Contains(summary, "1 line(s)") {
			t.Errorf("the search's summary reads %q, want 1 line(s)", summary)
		}
		shot(t, b, shots, "ui-search.png")
	})

	t.Run("another namespace shows the API's refusal", func(t *testing.T) {
		for _, path := range []string{"/jobs?namespace=" + url.QueryEscape(nsB), "/jobs/" + nsB + "/viewed", "/jobs/" + nsB + "/viewed/log"} {
			do(t, b, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS(`#refusal`)))
			refusal := get(t, b, chromedp.Text(chromedp.CSS(`#refusal .status`)))
			if !strings.HasPrefix(refusal, "Error from server (Forbidden): ") || !strings.Contains(refusal, viewer.name) || !strings.Contains(refusal, nsB) {
				t.Errorf("%s shows %q, want the API's Forbidden naming %s and %s", path, refusal, viewer.name, nsB)
			}
		}
	})
}

// chromiumPath finds Debian's headless Chromium (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH: apt-get install chromium (as .ci/run does)")
	return ""
}

// startUI runs `kubectl jobvault ui` as the user of kubeconfig until the test ends, and returns
// the URL it printed (with its token) and the base URL it serves on.
func startUI(t *testing.T, kubeconfig string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- plugin.Main(ctx, []string{"--kubeconfig", kubeconfig, "ui"}, genericiooptions.IOStreams{Out: w, ErrOut: os.Stderr})
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("kubectl jobvault ui exited %d", code)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err != nil {
		t.Fatalf("kubectl jobvault ui printed no URL: %v", err)
	}
	i := strings.Index(line, "http://127.0.0.1:")
	if i < 0 {
		t.Fatalf("kubectl jobvault ui printed %q, want its URL on 127.0.0.1", line)
	}
	printed := strings.Fields(line[i:])[0]
	u, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	return printed, u.Scheme + "://" + u.Host
}

// newBrowser starts headless Chromium for the test, stopped when it ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1100, 720), chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser, for the context's whole life: no timeout on it.
	if err := chromedp.Do(b); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return b
}

// browserWait bounds each batch of browser steps, so that a page that never shows what a wait
// asks for fails the test instead of hanging it.
const browserWait = 30 * time.Second

// do runs the browser's steps.
func do(t *testing.T, b context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// get runs one browser action and returns its value.
func get[T any](t *testing.T, b context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

// screenshotDir is where screenshots go (screenshotsEnv, under the module's root); empty: none.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(testbed.ModuleRoot(), dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// shot saves the page as name in dir, if screenshots are asked for.
func shot(t *testing.T, b context.Context, dir, name string) {
	t.Helper()
	if dir == "" {
		return
	}
	png := get(t, b, chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
