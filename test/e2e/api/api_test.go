// Package api proves the archive API (the apiserver program, issue 27) on the testbed: the real
// kube-apiserver reaches it through the aggregator (an APIService and an ExternalName Service of
// localhost), with the users' own credentials and the cluster's RBAC.
package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// reader is a user of the cluster with a kubeconfig of its own and the rights the test binds.
type reader struct {
	name, kubeconfig string
	rest             rest.Interface
	cfg              *rest.Config
}

func newReader(t *testing.T, env *testbed.Env, name string) reader {
	t.Helper()
	path := env.UserKubeconfig(t, name)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return reader{name: name, kubeconfig: path, rest: cs.RESTClient(), cfg: cfg}
}

// getEncoded reads path under archive.jobvault.io/v1alpha1 with query through the kube-apiserver
// with Accept-Encoding acceptEncoding (none when empty), on a transport that neither asks for
// gzip itself nor decodes it: the body as sent, and its Content-Encoding.
func (r reader) getEncoded(ctx context.Context, acceptEncoding string, query url.Values, path ...string) ([]byte, http.Header, error) {
	cfg := rest.CopyConfig(r.cfg)
	cfg.DisableCompression = true
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, nil, err
	}
	u = u.JoinPath(append([]string{"/apis", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version}, path...)...)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s: %s", resp.Status, clip(body))
	}
	return body, resp.Header, err
}

// get reads path under archive.jobvault.io/v1alpha1 with query, through the kube-apiserver.
func (r reader) get(ctx context.Context, query url.Values, path ...string) ([]byte, error) {
	req := r.rest.Get().AbsPath(append([]string{"/apis", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version}, path...)...)
	for k, vs := range query {
		for _, v := range vs {
			req.Param(k, v)
		}
	}
	return req.DoRaw(ctx)
}

func bind(t *testing.T, env *testbed.Env, ns, user string, role rbacv1.RoleRef) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role.Name, Namespace: ns}, RoleRef: role,
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := env.Client.Create(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
}

// TestArchiveAPI: a user with view in namespace A lists and reads A's archived jobs and their
// logs (byte-exact, by name and by UID after the job was deleted) through the kube-apiserver,
// and is refused namespace B; a user who may get VcJobs but not pods/log sees the jobs, not the
// logs; kubectl get prints the table; kubectl-jobvault does the same reads.
func TestArchiveAPI(t *testing.T) {
	s := stack.NewRig(t, objstore.BackendS3)
	env := s.Env
	ctx := t.Context()
	nsB := env.Namespace(t)

	jobs := []*batchv1alpha1.Job{
		testbed.Job(s.NS, "vault-a").Task("worker", 1, []string{"main"}).Obj(),
		testbed.Job(s.NS, "vault-b").Task("worker", 1, []string{"main"}).Obj(),
	}
	want := map[string][]byte{}
	for _, job := range jobs {
		logs := stack.PodLogs(t, env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
		want[job.Name] = testbed.Bytes(logs[testbed.PodName(job.Name, "worker", 0)]["main"].Current)
		stack.CreateAs(t, env, "alice", job)
	}
	// vault-c: two containers, each restarted once: every run is an instance of its own.
	multi := testbed.Job(s.NS, "vault-c").Task("main", 1, []string{"app", "sidecar"}, testbed.RestartsOnce()).Obj()
	multiPod := testbed.PodName(multi.Name, "main", 0)
	multiLogs := map[string]testbed.ContainerLogs{
		"app":     {Current: stack.SampleChunks(multiPod + "/app"), Previous: []testbed.Chunk{{Stream: "stderr", Data: []byte("app crashed ✗\n")}}},
		"sidecar": {Current: stack.SampleChunks(multiPod + "/sidecar"), Previous: []testbed.Chunk{{Stream: "stdout", Data: []byte("sidecar first run\n")}}},
	}
	env.SetPodLogs(t, s.NS, multiPod, multiLogs)
	stack.CreateAs(t, env, "alice", multi)
	jobs = append(jobs, multi)
	// vault-live: still running when read. Its pod of task "long" writes on; its pod of task
	// "crash" restarted once and completed: the earlier run is in the archive, the later on the
	// node.
	live := testbed.Job(s.NS, "vault-live").Task("crash", 1, []string{"app"}, testbed.RestartsOnce()).
		Task("long", 1, []string{"app", "sidecar"}, testbed.RunsFor("10m")).Obj()
	crashPod, longPod := testbed.PodName(live.Name, "crash", 0), testbed.PodName(live.Name, "long", 0)
	crashLogs := testbed.ContainerLogs{Current: stack.SampleChunks(crashPod + "/app"), Previous: []testbed.Chunk{{Stream: "stdout", Data: []byte("crash's first run\n")}}}
	longLogs := map[string]testbed.ContainerLogs{"app": {Current: stack.SampleChunks(longPod + "/app")}, "sidecar": {Current: stack.SampleChunks(longPod + "/sidecar")}}
	env.SetPodLogs(t, s.NS, crashPod, map[string]testbed.ContainerLogs{"app": crashLogs})
	env.SetPodLogs(t, s.NS, longPod, longLogs)
	stack.CreateAs(t, env, "alice", live)
	for _, job := range jobs {
		s.WaitArchived(t, job, 3*time.Minute)
	}
	// The user deletes vault-a: it is read from the archive alone.
	deleted := stack.GetJob(t, env, jobs[0])
	if err := env.Client.Delete(ctx, deleted, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(deleted), &batchv1alpha1.Job{})) {
		if time.Now().After(deadline) {
			t.Fatalf("job %s not gone a minute after its deletion", deleted.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}

	stack.StartAPI(t, s)
	viewer := newReader(t, env, "ann-viewer")
	bind(t, env, s.NS, viewer.name, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"})
	jobReader := newReader(t, env, "vic-jobs-only")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "vcjob-reader", Namespace: s.NS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"batch.volcano.sh"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list"}}}}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	bind(t, env, s.NS, jobReader.name, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name})
	waitViewAggregated(t, env)

	t.Run("viewer lists the namespace in pages", func(t *testing.T) {
		var names []string
		cont := ""
		for page := 0; ; page++ {
			q := url.Values{"limit": {"1"}}
			if cont != "" {
				q.Set("continue", cont)
			}
			raw, err := viewer.get(ctx, q, "namespaces", s.NS, "archivedjobs")
			if err != nil {
				t.Fatalf("list page %d: %v (%s)", page, err, raw)
			}
			var list v1alpha1.ArchivedJobList
			mustJSON(t, raw, &list)
			if len(list.Items) > 1 {
				t.Fatalf("page %d holds %d jobs, want at most limit=1", page, len(list.Items))
			}
			for _, j := range list.Items {
				names = append(names, j.Name)
				state := "archived"
				if j.Name == live.Name {
					state = "pending" // it runs
				}
				if j.Status.ArchiveState != state || j.Spec.Submitter != "alice" {
					t.Errorf("job %s: archive state %q, submitter %q; want %s by alice", j.Name, j.Status.ArchiveState, j.Spec.Submitter, state)
				}
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
		// Oldest first, by creation (whole seconds) then UID: the two jobs may share a second.
		slices.Sort(names)
		if strings.Join(names, ",") != "vault-a,vault-b,vault-c,vault-live" {
			t.Errorf("pages listed %v, want vault-a, vault-b, vault-c and vault-live once each", names)
		}
		raw, err := viewer.get(ctx, url.Values{"fieldSelector": {"spec.submitter=alice,status.archiveState=archived,metadata.name=vault-b"}}, "namespaces", s.NS, "archivedjobs")
		var list v1alpha1.ArchivedJobList
		if err == nil {
			mustJSON(t, raw, &list)
		}
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "vault-b" {
			t.Errorf("field selector: %v %s, want vault-b alone", err, raw)
		}
		if raw, err := viewer.get(ctx, url.Values{"fieldSelector": {"spec.queue=default"}}, "namespaces", s.NS, "archivedjobs"); !apierrors.IsBadRequest(err) {
			t.Errorf("unsupported field selector: %v %s, want BadRequest", err, raw)
		}
	})

	var uid string
	t.Run("viewer reads a deleted job by name and by UID", func(t *testing.T) {
		raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-a")
		if err != nil {
			t.Fatalf("get vault-a: %v (%s)", err, raw)
		}
		var byName v1alpha1.ArchivedJob
		mustJSON(t, raw, &byName)
		uid = string(byName.UID)
		if uid != string(deleted.UID) {
			t.Fatalf("vault-a has UID %s, want the deleted job's %s", uid, deleted.UID)
		}
		if len(byName.Status.Pods) != 1 || len(byName.Status.Pods[0].Containers) != 1 || len(byName.Status.Transitions) == 0 {
			t.Fatalf("vault-a: %d pods, %d transitions, want 1 pod with its container, and transitions: %s", len(byName.Status.Pods), len(byName.Status.Transitions), raw)
		}
		inst := byName.Status.Pods[0].Containers[0].Instances
		if len(inst) != 1 || inst[0].Name != "current" || inst[0].State != "stored" || inst[0].Bytes != int64(len(want["vault-a"])) {
			t.Errorf("vault-a's instances %+v, want current, stored, %d bytes", inst, len(want["vault-a"]))
		}
		raw, err = viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", uid)
		var byUID v1alpha1.ArchivedJob
		if err == nil {
			mustJSON(t, raw, &byUID)
		}
		if err != nil || byUID.Name != "vault-a" || string(byUID.UID) != uid {
			t.Errorf("get by UID %s: %v, got %s/%s", uid, err, byUID.Name, byUID.UID)
		}
	})

	t.Run("viewer reads the archived log bytes exactly", func(t *testing.T) {
		for _, id := range []string{"vault-a", uid} {
			raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", id, "log")
			if err != nil {
				t.Fatalf("log of %s: %v (%s)", id, err, raw)
			}
			if !bytes.Equal(raw, want["vault-a"]) {
				t.Errorf("log of %s: %d bytes %q, want the %d archived %q", id, len(raw), clip(raw), len(want["vault-a"]), clip(want["vault-a"]))
			}
		}
		full := want["vault-b"]
		lines := strings.SplitAfter(string(full), "\n")
		for _, c := range []struct {
			q    url.Values
			want string
		}{
			{url.Values{"tailLines": {"1"}}, lines[len(lines)-1]},
			{url.Values{"tailLines": {"2"}}, strings.Join(lines[len(lines)-2:], "")},
			{url.Values{"limitBytes": {"7"}}, string(full[:7])},
			{url.Values{"container": {"main"}, "pod": {testbed.PodName("vault-b", "worker", 0)}}, string(full)},
		} {
			raw, err := viewer.get(ctx, c.q, "namespaces", s.NS, "archivedjobs", "vault-b", "log")
			if err != nil || string(raw) != c.want {
				t.Errorf("log of vault-b with %v: %v %q, want %q", c.q, err, clip(raw), clip([]byte(c.want)))
			}
		}
		if raw, err := viewer.get(ctx, url.Values{"container": {"sidecar"}}, "namespaces", s.NS, "archivedjobs", "vault-b", "log"); !apierrors.IsNotFound(err) {
			t.Errorf("log of a container never recorded: %v %s, want NotFound", err, raw)
		}
	})

	t.Run("a client accepting gzip gets a one-member gzip object as stored, others the plain bytes", func(t *testing.T) {
		// A log of one gzip member, written whole (the capture writes a log of less than 32 KiB so).
		name, whole, stored := archivedLog(t, s, 2, 1, false)
		lines := strings.SplitAfter(strings.TrimSuffix(string(whole), "\n"), "\n")
		lines[len(lines)-1] += "\n" // the log ends with a newline
		for _, c := range []struct {
			accept   string // Accept-Encoding; empty: none sent
			query    url.Values
			wantGzip bool
			want     []byte
		}{
			{"gzip", nil, true, whole},
			{"br;q=1.0, gzip;q=0.5, identity", nil, true, whole},
			{"gzip", url.Values{"limitBytes": {strconv.Itoa(len(whole))}}, true, whole}, // a limit past the end: the whole log
			{"gzip;q=0", nil, false, whole},
			{"identity", nil, false, whole},
			{"", nil, false, whole},
			{"gzip", url.Values{"tailLines": {"1"}}, false, []byte(lines[len(lines)-1])},
			{"gzip", url.Values{"limitBytes": {"5"}}, false, whole[:5]},
		} {
			body, h, err := viewer.getEncoded(ctx, c.accept, c.query, "namespaces", s.NS, "archivedjobs", name, "log")
			if err != nil {
				t.Errorf("Accept-Encoding %q, %v: %v", c.accept, c.query, err)
				continue
			}
			got := body
			if enc := h.Get("Content-Encoding"); c.wantGzip {
				// The object as stored, not compressed again: the server passes it through.
				if enc != "gzip" || !bytes.Equal(body, stored) {
					t.Errorf("Accept-Encoding %q, %v: Content-Encoding %q, %d bytes; want gzip, the %d bytes of the stored object", c.accept, c.query, enc, len(body), len(stored))
					continue
				}
				if got, err = gunzip(body); err != nil {
					t.Errorf("Accept-Encoding %q, %v: decompress: %v", c.accept, c.query, err)
					continue
				}
			} else if enc != "" {
				t.Errorf("Accept-Encoding %q, %v: Content-Encoding %q, want none", c.accept, c.query, enc)
				continue
			}
			if !bytes.Equal(got, c.want) {
				t.Errorf("Accept-Encoding %q, %v: %d bytes %q, want the %d archived %q", c.accept, c.query, len(got), clip(got), len(c.want), clip(c.want))
			}
			if !slices.Contains(h.Values("Vary"), "Accept-Encoding") {
				t.Errorf("Accept-Encoding %q, %v: Vary %q, want Accept-Encoding (caches must tell the encodings apart)", c.accept, c.query, h.Values("Vary"))
			}
		}
		// A refusal stays a plain Status a client can read, gzip accepted or not.
		body, h, err := viewer.getEncoded(ctx, "gzip", url.Values{"container": {"sidecar"}}, "namespaces", s.NS, "archivedjobs", "vault-a", "log")
		if err == nil || h.Get("Content-Encoding") == "gzip" || !strings.Contains(string(body), `"reason":"NotFound"`) {
			t.Errorf("a refused log with gzip accepted: %v, Content-Encoding %q, %s; want a plain NotFound Status", err, h.Get("Content-Encoding"), clip(body))
		}
	})

	t.Run("a log of several gzip members reaches a client that reads one member whole", func(t *testing.T) {
		// curl --compressed fails on a second member and browsers stop at the first (curl/curl#22156):
		// neither a log composed from segments nor one written whole, a member per 32 KiB of output
		// as the capture compresses it, may go out as Content-Encoding gzip.
		captured := readObject(t, s.Store, vaultALog(t, s, uid))
		if got, err := firstMember(captured); err != nil || bytes.Equal(got, want["vault-a"]) {
			t.Fatalf("vault-a's captured log: the first member %d bytes, %v; want less than the %d of the log (a member per 32 KiB)", len(got), err, len(want["vault-a"]))
		}
		for _, name := range []string{"vault-a", "vault-members-0", "vault-members-1"} {
			whole := want["vault-a"]
			switch name {
			case "vault-members-0":
				_, whole, _ = archivedLog(t, s, 0, 3, true)
			case "vault-members-1":
				_, whole, _ = archivedLog(t, s, 1, 3, false)
			}
			for _, accept := range []string{"gzip", ""} {
				body, h, err := viewer.getEncoded(ctx, accept, nil, "namespaces", s.NS, "archivedjobs", name, "log")
				if err != nil {
					t.Fatalf("%s, Accept-Encoding %q: %v", name, accept, err)
				}
				got := body
				if h.Get("Content-Encoding") == "gzip" {
					if got, err = firstMember(body); err != nil {
						t.Fatalf("%s, Accept-Encoding %q: the first gzip member: %v", name, accept, err)
					}
				}
				if !bytes.Equal(got, whole) {
					t.Errorf("%s, Accept-Encoding %q: Content-Encoding %q, a one-member reader gets %d bytes %q; want the %d archived %q",
						name, accept, h.Get("Content-Encoding"), len(got), clip(got), len(whole), clip(whole))
				}
			}
			// Go's reader reads every member: client-go's read is exact too.
			if raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", name, "log"); err != nil || !bytes.Equal(raw, whole) {
				t.Errorf("%s through client-go: %v, %d bytes, want the %d archived", name, err, len(raw), len(whole))
			}
		}
	})

	t.Run("viewer reads every run of every container", func(t *testing.T) {
		raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-c")
		if err != nil {
			t.Fatalf("get vault-c: %v (%s)", err, raw)
		}
		var job v1alpha1.ArchivedJob
		mustJSON(t, raw, &job)
		var got []string
		for _, p := range job.Status.Pods {
			for _, c := range p.Containers {
				for _, i := range c.Instances {
					got = append(got, fmt.Sprintf("%s/%s/%s:%s", p.Name, c.Name, i.Name, i.State))
				}
			}
		}
		slices.Sort(got)
		wantRuns := []string{multiPod + "/app/current:stored", multiPod + "/app/previous-1:stored",
			multiPod + "/sidecar/current:stored", multiPod + "/sidecar/previous-1:stored"}
		if !slices.Equal(got, wantRuns) {
			t.Errorf("vault-c's runs %v, want %v", got, wantRuns)
		}
		for _, c := range []struct {
			q    url.Values
			want []byte
		}{
			{url.Values{"container": {"app"}, "previous": {"true"}}, testbed.Bytes(multiLogs["app"].Previous)},
			{url.Values{"container": {"sidecar"}, "instance": {"previous-1"}}, testbed.Bytes(multiLogs["sidecar"].Previous)},
			{url.Values{"container": {"sidecar"}}, testbed.Bytes(multiLogs["sidecar"].Current)},
		} {
			raw, err := viewer.get(ctx, c.q, "namespaces", s.NS, "archivedjobs", "vault-c", "log")
			if err != nil || !bytes.Equal(raw, c.want) {
				t.Errorf("log of vault-c with %v: %v %q, want %q", c.q, err, clip(raw), clip(c.want))
			}
		}
		raw, err = viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-c", "log")
		if !apierrors.IsBadRequest(err) || !strings.Contains(string(raw), "choose one of: [app sidecar]") {
			t.Errorf("log of vault-c without a container: %v %s, want BadRequest naming app and sidecar", err, raw)
		}
	})

	t.Run("viewer is refused another namespace", func(t *testing.T) {
		for _, path := range [][]string{
			{"namespaces", nsB, "archivedjobs"},
			{"namespaces", nsB, "archivedjobs", "vault-a"},
			{"namespaces", nsB, "archivedjobs", "vault-a", "log"},
			{"archivedjobs"},
		} {
			if raw, err := viewer.get(ctx, nil, path...); !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v %s, want Forbidden", strings.Join(path, "/"), err, raw)
			}
		}
	})

	t.Run("a reader of VcJobs without pods/log sees jobs, not logs", func(t *testing.T) {
		if raw, err := jobReader.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-a"); err != nil {
			t.Errorf("get vault-a: %v (%s)", err, raw)
		}
		if raw, err := jobReader.get(ctx, nil, "namespaces", s.NS, "archivedjobs"); err != nil {
			t.Errorf("list: %v (%s)", err, raw)
		}
		if raw, err := jobReader.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-a", "log"); !apierrors.IsForbidden(err) {
			t.Errorf("log of vault-a: %v %s, want Forbidden", err, clip(raw))
		}
		if raw, err := jobReader.get(ctx, nil, "namespaces", nsB, "archivedjobs"); !apierrors.IsForbidden(err) {
			t.Errorf("list namespace B: %v %s, want Forbidden", err, raw)
		}
	})

	t.Run("the kube-apiserver's audit log names who read which log", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for !audited(t, env.AuditLogPath(), viewer.name, s.NS, "vault-a", "log") {
			if time.Now().After(deadline) {
				t.Fatalf("no audit event of %s reading the log of %s/vault-a in %s", viewer.name, s.NS, env.AuditLogPath())
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("kubectl jobvault gets jobs and prints logs", func(t *testing.T) {
		pluginProofs(t, s.NS, nsB, uid, viewer, want)
	})

	t.Run("kubectl jobvault logs reads a running job live and its earlier run from the archive", func(t *testing.T) {
		waitInstance(t, viewer, s.NS, live.Name, crashPod, "app", "previous-1")
		if phase := stack.GetJob(t, env, live).Status.State.Phase; phase != batchv1alpha1.Running {
			t.Fatalf("vault-live is %s, want Running while its logs are read", phase)
		}
		run := pluginRunner(t, viewer)
		// The running pod's lines, which only the node has, are what kubectl logs prints of it,
		// whatever the node serves of a line not ended yet or a tail of long lines; every
		// container in the pod's order (kubectl's own --all-containers has none).
		kubectlLogs := func(args ...string) string {
			kubectl := append([]string{"--kubeconfig", viewer.kubeconfig, "-n", s.NS, "logs", longPod}, args...)
			out, err := exec.CommandContext(ctx, "kubectl", kubectl...).Output()
			if err != nil || !strings.HasPrefix(string(out), "hello from "+longPod+"/app\n") && !strings.HasPrefix(string(out), "[pod/"+longPod+"/") {
				t.Fatalf("kubectl %s: %v %q, want the running container's lines", strings.Join(kubectl, " "), err, clip(out))
			}
			return string(out)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"-c", "app"}, kubectlLogs("-c", "app")},
			{[]string{"--all-containers", "--prefix", "--tail=1"},
				kubectlLogs("-c", "app", "--prefix", "--tail=1") + kubectlLogs("-c", "sidecar", "--prefix", "--tail=1")},
		} {
			plugin := append([]string{"-n", s.NS, "logs", "job/" + live.Name, longPod}, c.args...)
			out, errOut, err := run(plugin...)
			if err != nil || out != c.want {
				t.Errorf("kubectl jobvault %s: %v, %q, want what kubectl logs prints: %q\n%s", strings.Join(plugin, " "), err, clip([]byte(out)), clip([]byte(c.want)), errOut)
			}
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			// The completed pod's last run, its first from the archive.
			{[]string{crashPod}, string(testbed.Bytes(crashLogs.Current))},
			{[]string{crashPod, "--previous"}, "crash's first run\n"},
			{[]string{crashPod, "--instance", "previous-1", "--prefix"}, "[pod/" + crashPod + "/app] crash's first run\n"},
		} {
			args := append([]string{"-n", s.NS, "logs", "job/" + live.Name}, c.args...)
			out, errOut, err := run(args...)
			if err != nil || out != c.want {
				t.Errorf("kubectl jobvault %s: %v, %q, want %q\n%s", strings.Join(args, " "), err, clip([]byte(out)), clip([]byte(c.want)), errOut)
			}
		}
		out, errOut, err := run("-n", s.NS, "logs", "job/vault-c", "--all-containers", "--prefix", "--previous")
		wantOut := "[pod/" + multiPod + "/app] app crashed ✗\n[pod/" + multiPod + "/sidecar] sidecar first run\n"
		if err != nil || out != wantOut {
			t.Errorf("kubectl jobvault logs job/vault-c --all-containers --prefix --previous: %v, %q, want %q\n%s", err, out, wantOut, errOut)
		}
	})

	t.Run("kubectl jobvault logs --timestamps stamps the live lines and warns that the archive holds none", func(t *testing.T) {
		if phase := stack.GetJob(t, env, live).Status.State.Phase; phase != batchv1alpha1.Running {
			t.Fatalf("vault-live is %s, want Running while its logs are read", phase)
		}
		run := pluginRunner(t, viewer)
		kubectl := []string{"--kubeconfig", viewer.kubeconfig, "-n", s.NS, "logs", longPod, "-c", "app", "--timestamps"}
		stamped, err := exec.CommandContext(ctx, "kubectl", kubectl...).Output()
		if first, _, _ := strings.Cut(string(stamped), " "); err != nil || !strings.Contains(string(stamped), " hello from "+longPod+"/app\n") {
			t.Fatalf("kubectl %s: %v %q, want the running container's lines", strings.Join(kubectl, " "), err, clip(stamped))
		} else if _, err := time.Parse(time.RFC3339Nano, first); err != nil {
			t.Fatalf("kubectl %s: the first line starts with %q, want a timestamp", strings.Join(kubectl, " "), first)
		}
		args := []string{"-n", s.NS, "logs", "job/" + live.Name, longPod, "-c", "app", "--timestamps"}
		out, errOut, err := run(args...)
		if err != nil || out != string(stamped) || errOut != "" {
			t.Errorf("kubectl jobvault %s: %v, %q, stderr %q; want what kubectl logs --timestamps prints: %q, and no warning", strings.Join(args, " "), err, clip([]byte(out)), errOut, clip(stamped))
		}
		// What comes from the archive is printed as archived, with a warning on stderr naming it.
		for _, c := range []struct {
			args []string
			want string
			what string // the log the warning names
		}{
			{[]string{"job/" + live.Name, crashPod, "--previous", "--timestamps"}, "crash's first run\n", crashPod},
			{[]string{"job/vault-a", "--timestamps"}, string(want["vault-a"]), testbed.PodName("vault-a", "worker", 0)},
		} {
			args := append([]string{"-n", s.NS, "logs"}, c.args...)
			out, errOut, err := run(args...)
			if err != nil || out != c.want || !strings.HasPrefix(errOut, "Warning: ") || !strings.Contains(errOut, "no timestamps") || !strings.Contains(errOut, c.what) {
				t.Errorf("kubectl jobvault %s: %v, %q, stderr %q; want %q and a warning naming %s that the archive holds no timestamps", strings.Join(args, " "), err, clip([]byte(out)), errOut, clip([]byte(c.want)), c.what)
			}
		}
		// Through the API, timestamps=true is answered with the archived bytes and the same warning.
		body, h, err := viewer.getEncoded(ctx, "", url.Values{"timestamps": {"true"}}, "namespaces", s.NS, "archivedjobs", "vault-a", "log")
		if err != nil || !bytes.Equal(body, want["vault-a"]) || !strings.Contains(strings.Join(h.Values("Warning"), " "), "no timestamps") {
			t.Errorf("log of vault-a with timestamps=true: %v, %q, Warning %q; want the archived bytes and a warning", err, clip(body), h.Values("Warning"))
		}
	})

	t.Run("kubectl jobvault describe prints the job's record and its verification", func(t *testing.T) {
		run := pluginRunner(t, viewer)
		out, errOut, err := run("-n", s.NS, "describe", "job", "vault-c")
		if err != nil {
			t.Fatalf("kubectl jobvault describe job vault-c: %v\n%s%s", err, out, errOut)
		}
		var job v1alpha1.ArchivedJob
		raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", "vault-c")
		if err != nil {
			t.Fatal(err)
		}
		mustJSON(t, raw, &job)
		for _, want := range []string{"Name:", "vault-c", "Submitter:", "alice", "State:", "archived", job.Status.ArchiveLocation,
			"Phases:", "Completed", multiPod + ":", "app (regular):", "sidecar (regular):", "previous-1", "stored",
			job.Status.Pods[0].Containers[0].Instances[0].SHA256, "Verification:", "OK: 4 log(s), 4 stored and re-read, 0 unavailable"} {
			if !strings.Contains(out, want) {
				t.Errorf("describe job vault-c lacks %q:\n%s", want, out)
			}
		}
		// A reader of jobs without the right to read logs gets the record, and the refusal of
		// the verification, which reads the logs.
		out, errOut, err = pluginRunner(t, jobReader)("-n", s.NS, "describe", "job", "vault-a")
		if err != nil || !strings.Contains(out, "Verification:") || !strings.Contains(out, "not run: Error from server (Forbidden)") {
			t.Errorf("describe as a reader of jobs: %v\n%s%s\nwant the record and the verification Forbidden", err, out, errOut)
		}
	})

	t.Run("kubectl jobvault verify prints the findings of archiver logs verify", func(t *testing.T) {
		run := pluginRunner(t, viewer)
		for _, name := range []string{"vault-a", "vault-c"} {
			raw, err := viewer.get(ctx, nil, "namespaces", s.NS, "archivedjobs", name)
			if err != nil {
				t.Fatal(err)
			}
			var job v1alpha1.ArchivedJob
			mustJSON(t, raw, &job)
			rep, err := verify.Job(ctx, s.Records, s.Store, string(job.UID), verify.JobOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var admin strings.Builder
			if err := rep.WriteText(&admin); err != nil {
				t.Fatal(err)
			}
			out, errOut, err := run("-n", s.NS, "verify", "job", name)
			if err != nil || out != admin.String() || !strings.HasPrefix(out, "OK ") {
				t.Errorf("kubectl jobvault verify job %s: %v\n%s%s\nwant what archiver logs verify prints:\n%s", name, err, out, errOut, admin.String())
			}
		}
		out, errOut, err := pluginRunner(t, jobReader)("-n", s.NS, "verify", "job", "vault-a")
		if err == nil || !strings.HasPrefix(errOut, "Error from server (Forbidden): ") {
			t.Errorf("verify as a reader of jobs without pods/log: %v\n%s%s\nwant Error from server (Forbidden)", err, out, errOut)
		}
	})

	t.Run("kubectl jobvault says Forbidden as kubectl does for every command", func(t *testing.T) {
		run := pluginRunner(t, viewer)
		for _, args := range [][]string{
			{"get", "jobs"}, {"get", "job", "vault-a"}, {"describe", "job", "vault-a"}, {"verify", "job", "vault-a"},
			{"logs", "job/vault-a"}, {"logs", "job/vault-a", "--all-containers", "--prefix"},
		} {
			out, errOut, err := run(append([]string{"-n", nsB}, args...)...)
			// The server's own message, which names the namespace: kubectl prints it, not "unknown".
			if err == nil || !strings.HasPrefix(errOut, "Error from server (Forbidden): ") || !strings.Contains(errOut, nsB) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("kubectl jobvault %s -n B: %v\nstdout %q\nstderr %q\nwant one line Error from server (Forbidden) with the server's message", strings.Join(args, " "), err, out, errOut)
			}
		}
	})

	t.Run("kubectl get prints the table", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", viewer.kubeconfig, "get", "archivedjobs", "-n", s.NS).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get archivedjobs: %v\n%s", err, out)
		}
		header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
		if strings.Join(header, " ") != "NAME PHASE ARCHIVE SUBMITTER AGE FINISHED" || !strings.Contains(string(out), "vault-a") ||
			!strings.Contains(string(out), "archived") {
			t.Errorf("kubectl get archivedjobs printed:\n%s\nwant the columns NAME PHASE ARCHIVE SUBMITTER AGE FINISHED and vault-a, archived", out)
		}
		out, err = exec.CommandContext(ctx, "kubectl", "--kubeconfig", viewer.kubeconfig, "get", "archivedjobs", "-n", nsB).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Error from server (Forbidden)") {
			t.Errorf("kubectl get archivedjobs -n B: %v\n%s\nwant Error from server (Forbidden)", err, out)
		}
	})
}

// pluginProofs runs kubectl-jobvault as the viewer: it lists the namespace's jobs as a table and
// as JSON in pages, prints a deleted job's log byte-exact by name and by UID, and reports a
// refusal as kubectl does.
func pluginProofs(t *testing.T, ns, nsB, uid string, viewer reader, want map[string][]byte) {
	run := pluginRunner(t, viewer)
	out, errOut, err := run("-n", ns, "get", "jobs")
	if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); err != nil || strings.Join(header, " ") != "NAME PHASE ARCHIVE SUBMITTER AGE FINISHED" ||
		!strings.Contains(out, "vault-a") || !strings.Contains(out, "vault-b") {
		t.Errorf("kubectl jobvault get jobs: %v\n%s%s\nwant the table with vault-a and vault-b", err, out, errOut)
	}
	out, errOut, err = run("-n", ns, "get", "jobs", "--state=archived", "--submitter=alice", "--since=1h", "-o", "json", "--chunk-size=1")
	var list v1alpha1.ArchivedJobList
	if err == nil {
		err = json.Unmarshal([]byte(out), &list)
	}
	if err != nil || len(list.Items) != 3 {
		t.Errorf("kubectl jobvault get jobs -o json in pages of 1: %v, %d jobs, want 3\n%s", err, len(list.Items), errOut)
	}
	for _, id := range []string{"job/vault-a", "job/" + uid} {
		out, errOut, err = run("-n", ns, "logs", id)
		if err != nil || out != string(want["vault-a"]) {
			t.Errorf("kubectl jobvault logs %s: %v, %d bytes %q, want the %d archived\n%s", id, err, len(out), clip([]byte(out)), len(want["vault-a"]), errOut)
		}
	}
	out, errOut, err = run("-n", ns, "logs", "job/vault-c", "-c", "app", "--previous")
	if err != nil || out != "app crashed ✗\n" {
		t.Errorf("kubectl jobvault logs job/vault-c -c app --previous: %v, %q\n%s", err, out, errOut)
	}
	out, errOut, err = run("-n", nsB, "get", "jobs")
	if err == nil || !strings.HasPrefix(errOut, "Error from server (Forbidden): ") || strings.Contains(errOut, "goroutine") {
		t.Errorf("kubectl jobvault get jobs -n B: %v\n%s%s\nwant Error from server (Forbidden)", err, out, errOut)
	}
	out, errOut, err = run("-n", nsB, "logs", "job/vault-a")
	if err == nil || !strings.HasPrefix(errOut, "Error from server (Forbidden): ") {
		t.Errorf("kubectl jobvault logs -n B: %v\n%s%s\nwant Error from server (Forbidden)", err, out, errOut)
	}
}

// pluginRunner returns a function that runs kubectl-jobvault (built once) as r with args and
// returns its stdout, its stderr and how it exited.
func pluginRunner(t *testing.T, r reader) func(args ...string) (string, string, error) {
	bin := testbed.GoBuild(t, "./archiver/kubectl-jobvault")
	return func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"--kubeconfig", r.kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
}

// waitInstance waits until the archive records the container's run instance of job name as
// stored.
func waitInstance(t *testing.T, r reader, ns, name, pod, container, instance string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		raw, err := r.get(t.Context(), nil, "namespaces", ns, "archivedjobs", name)
		var job v1alpha1.ArchivedJob
		if err == nil && json.Unmarshal(raw, &job) == nil {
			for _, p := range job.Status.Pods {
				for _, c := range p.Containers {
					for _, i := range c.Instances {
						if p.Name == pod && c.Name == container && i.Name == instance && i.State == "stored" {
							return
						}
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive holds no stored %s of container %s of pod %s of job %s after 2 minutes: %v %s", instance, container, pod, name, err, clip(raw))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// audited reports whether the audit log at path holds an allowed get by user of the archived
// job's subresource in namespace ns.
func audited(t *testing.T, path, user, ns, name, subresource string) bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the audit log: %v", err)
	}
	for line := range strings.Lines(string(raw)) {
		var e struct {
			Stage     string                    `json:"stage"`
			User      struct{ Username string } `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Name, Subresource, APIGroup string
			} `json:"objectRef"`
			ResponseStatus struct{ Code int } `json:"responseStatus"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		o := e.ObjectRef
		if e.Stage == "ResponseComplete" && e.User.Username == user && o.APIGroup == v1alpha1.GroupName && o.Resource == v1alpha1.Resource &&
			o.Namespace == ns && o.Name == name && o.Subresource == subresource && e.ResponseStatus.Code == 200 {
			return true
		}
	}
	return false
}

// waitViewAggregated waits until kube-controller-manager has aggregated config/apiserver's
// ClusterRole into view.
func waitViewAggregated(t *testing.T, env *testbed.Env) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var view rbacv1.ClusterRole
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "view"}, &view); err == nil {
			for _, r := range view.Rules {
				if len(r.APIGroups) == 1 && r.APIGroups[0] == v1alpha1.GroupName {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the view ClusterRole has not aggregated jobvault-archive-view after a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, raw []byte, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("decode %T: %v (%s)", into, err, clip(raw))
	}
}

// readObject reads the object under key from store, as stored.
func readObject(t *testing.T, store objstore.Store, key string) []byte {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vaultALog returns the object key of the log of job uid (vault-a: one pod, one container).
func vaultALog(t *testing.T, s *stack.Rig, uid string) string {
	t.Helper()
	logs, err := inspect.List(t.Context(), s.Records, uid)
	if err != nil || len(logs) != 1 {
		t.Fatalf("vault-a's recorded logs: %v %v, want one", logs, err)
	}
	return logs[0].Key
}

// archivedLog records archived job vault-members-i of the rig's namespace with one pod whose log
// is the given number of gzip members: composed by the store from as many segments (S3's
// multipart copy, as capture.Assemble composes a log: the row has no stored sha256), or written
// whole with the sha256 the store checked, as the capture writes a log that fits one segment, a
// member per 32 KiB block. It returns the job's name, the log's bytes and the stored object.
func archivedLog(t *testing.T, s *stack.Rig, i, members int, composed bool) (string, []byte, []byte) {
	t.Helper()
	ctx := t.Context()
	// Not alice's and older than a day: the plugin's proofs count alice's jobs of the last hour.
	created := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	done := created.Add(time.Minute)
	job := record.Job{UID: fmt.Sprintf("00000000-0000-4000-8000-0000000c0de%d", i), Namespace: s.NS, Name: fmt.Sprintf("vault-members-%d", i),
		Queue: "default", Submitter: "carol", CreatedAt: created, FinishedAt: &done, Phase: "Completed"}
	pod := record.Pod{UID: job.UID + "-pod0", JobUID: job.UID, Namespace: s.NS, Name: job.Name + "-worker-0", Task: "worker",
		Node: "node-1", Phase: "Succeeded", CreatedAt: created, StartedAt: &created, FinishedAt: &done}
	if err := s.Records.UpsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := s.Records.UpsertPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	prefix := "members/" + s.NS + "/" + job.UID + "/"
	key := prefix + "main.log.gz"
	opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip"}
	var whole, object []byte
	var keys []string
	for seg := range members {
		// Composed: each segment over S3's 5 MiB part minimum, stored uncompressed in its member.
		n, level := 32<<10, gzip.DefaultCompression
		if composed {
			n, level = 6<<20, gzip.NoCompression
		}
		plain := bytes.Repeat([]byte(fmt.Sprintf("member %d: step %d loss 0.%04d\n", seg, seg, seg)), n/30)
		whole = append(whole, plain...)
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, level)
		if _, err := zw.Write(plain); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		object = append(object, gz.Bytes()...)
		if composed {
			keys = append(keys, fmt.Sprintf("%sseg-%d.gz", prefix, seg))
			if err := s.Store.Put(ctx, keys[seg], bytes.NewReader(gz.Bytes()), opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	var storedSHA256 string
	if composed {
		if err := s.Store.Compose(ctx, key, keys, opts); err != nil {
			t.Fatal(err)
		}
		object = readObject(t, s.Store, key)
	} else {
		if err := s.Store.Put(ctx, key, bytes.NewReader(object), opts); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(object)
		storedSHA256 = hex.EncodeToString(sum[:])
	}
	sum := sha256.Sum256(whole)
	if err := s.Records.PutLogObject(ctx, record.LogObject{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular,
		Instance: record.InstanceCurrent, ObjectKey: key, Bytes: int64(len(whole)), StoredBytes: int64(len(object)),
		SHA256: hex.EncodeToString(sum[:]), StoredSHA256: storedSHA256, State: record.LogStored}); err != nil {
		t.Fatal(err)
	}
	if err := s.Records.MarkPodArchived(ctx, pod.UID, done, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Records.MarkJobArchived(ctx, job.UID, s.Store.URL(prefix), done.Add(time.Second), ""); err != nil {
		t.Fatal(err)
	}
	return job.Name, whole, object
}

// firstMember decompresses the first gzip member of b alone, as curl and browsers read a body.
func firstMember(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	return io.ReadAll(zr)
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// clip shortens a log for a failure message.
func clip(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%q… (%d bytes)", b[:200], len(b))
	}
	return string(b)
}
