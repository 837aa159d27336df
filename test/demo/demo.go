package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	busv1alpha1 "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

type options struct {
	Backend string
	FSRoot  string
	// Dir is the demo's directory: kubectl-jobvault is built into Dir/bin.
	Dir string
	// Explore prints how to look around the running stack.
	Explore bool
	// RealNode runs one more job on the testbed's real node (kubelet, containerd, runc).
	RealNode bool
}

// jobSummary is one line of the summary, as read back from the database.
type jobSummary struct {
	Name, UID, Phase, Submitter, Location string
	// Deleted is set for a job deleted before it ended.
	Deleted    bool
	Retries    int32
	Pods, Logs int
	Keys       []string
	// Nodes are the nodes its pods ran on, as recorded.
	Nodes []string
	// LogPods are the names of its pods with a stored log of their current run, sorted.
	LogPods []string
}

// sample is one of the demo's jobs and what happens to it.
type sample struct {
	job *batchv1alpha1.Job
	// deleteWhenRunning deletes the job once it runs, as a user cancelling it would.
	deleteWhenRunning bool
	// real: its pods run on the real node, whose containers write their own output.
	real bool
}

// realNodeJob is the job the demo runs on the real node (RealNode): the workload program writes
// 4 KiB to stdout over a second and exits 0.
const realNodeJob = "on-real-node"

// samples are the demo's jobs; with rn, one more whose pods run on the real node.
func samples(ns string, rn *testbed.RealNode) []sample {
	s := []sample{
		{job: testbed.Job(ns, "train-ok").Task("ps", 1, []string{"main"}).Task("worker", 2, []string{"main"}).Obj()},
		{job: testbed.Job(ns, "flaky").Task("worker", 1, []string{"main"}, testbed.Fails()).
			Policy(busv1alpha1.PodFailedEvent, busv1alpha1.RestartJobAction).MaxRetry(2).Obj()},
		{job: testbed.Job(ns, "cancelled").Task("worker", 2, []string{"main"}, testbed.RunsFor("1h")).Obj(), deleteWhenRunning: true},
		{job: testbed.Job(ns, "multi").Task("main", 1, []string{"app", "sidecar"}, testbed.InitContainers("fetch"), testbed.RestartsOnce()).Obj()},
	}
	if rn != nil {
		s = append(s, sample{real: true, job: testbed.Job(ns, realNodeJob).Task("worker", 1, []string{"main"},
			rn.Pods(map[string]testbed.Workload{"main": {Bytes: 4 << 10, For: time.Second, Lines: []int{64}}})).Obj()})
	}
	return s
}

// demoOutput is what a container of the demo writes.
func demoOutput(pod, container string) []testbed.Chunk {
	return []testbed.Chunk{{Stream: "stdout", Data: []byte(fmt.Sprintf("%s/%s: step 1 of 2 ✓\n%s/%s: done\n", pod, container, pod, container))},
		{Stream: "stderr", Data: []byte("a warning on stderr\n")}}
}

func step(w io.Writer, start time.Time, format string, args ...any) {
	fmt.Fprintf(w, "[demo %5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// result is what the demo did, for its test to check against the database and the store.
type result struct {
	Jobs     []jobSummary
	DSN      string
	Archiver *stack.Archiver
	// RealNode is the real node, if the demo ran a job on it.
	RealNode *testbed.RealNode
}

// viewer is the demo's reader of the archive: a teammate of alice with the ClusterRole view in
// the demo's namespace and no other rights.
const viewer = "bob@example.com"

// reader is how a user reads the archive through the archive API: viewer's kubeconfig and the
// bin directory holding kubectl-jobvault.
type reader struct {
	Kubeconfig, BinDir string
}

// run starts the stack, runs the sample jobs through it and prints the summary.
func run(t stack.TB, w io.Writer, o options) (*result, error) {
	start := time.Now()
	step(w, start, "starting kube-apiserver, etcd, Volcano and KWOK (binaries from %s/bin; first build: `make testbed`)", testbed.CacheDir())
	env := testbed.Cluster(t)
	step(w, start, "starting Postgres")
	dsn := testbed.Postgres(t)
	step(w, start, "building and starting the webhook (TLS, registered by config/webhook's MutatingWebhookConfiguration)")
	stack.Webhook(t, env)
	ns := "demo"
	if err := env.Client.Create(context.Background(), namespace(ns)); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	var rn *testbed.RealNode
	if o.RealNode {
		step(w, start, "starting the real node %s (kubelet %s, containerd and runc; needs root)", testbed.RealNodeName, testbed.Versions["KUBE_VERSION"])
		rn = env.RealNode(t, testbed.RealNodeOptions{})
		step(w, start, "real node %s ready in %.1fs", rn.Name, rn.StartedIn.Seconds())
	}
	step(w, start, "building and starting the archiver (store: %s)", o.Backend)
	a := stack.NewArchiver(t, env, dsn, stack.Options{Backend: o.Backend, FSRoot: o.FSRoot})
	a.Start(t)
	step(w, start, "building and starting the archive API (archive.jobvault.io, registered with the kube-apiserver's aggregator) and kubectl-jobvault")
	stack.StartAPI(t, &stack.Rig{Archiver: a})
	rd, err := newReader(t, env, ns, o.Dir)
	if err != nil {
		return nil, err
	}

	ctx := context.Background()
	user, err := client.New(env.UserConfig(t, "alice@example.com", "data-science"), client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	jobs := samples(ns, rn)
	for _, s := range jobs {
		for _, task := range s.job.Spec.Tasks {
			if s.real {
				break // the real node's containers write their own output
			}
			for i := range int(task.Replicas) {
				pod := testbed.PodName(s.job.Name, task.Name, i)
				logs := map[string]testbed.ContainerLogs{}
				for _, c := range task.Template.Spec.InitContainers {
					logs[c.Name] = testbed.ContainerLogs{Current: demoOutput(pod, c.Name)}
				}
				for _, c := range task.Template.Spec.Containers {
					logs[c.Name] = testbed.ContainerLogs{Current: demoOutput(pod, c.Name)}
					if task.Template.Labels[testbed.RestartOnceLabel] == "true" {
						// What its first run wrote before it crashed and was restarted.
						logs[c.Name] = testbed.ContainerLogs{Current: demoOutput(pod, c.Name),
							Previous: []testbed.Chunk{{Stream: "stderr", Data: []byte(pod + "/" + c.Name + ": first run crashed\n")}}}
					}
				}
				env.SetPodLogs(t, ns, pod, logs)
			}
		}
		if err := user.Create(ctx, s.job); err != nil {
			return nil, fmt.Errorf("submit %s: %w", s.job.Name, err)
		}
		where := "KWOK's nodes"
		if s.real {
			where = "the real node " + rn.Name
		}
		step(w, start, "submitted job %s/%s as alice@example.com (its pods run on %s)", ns, s.job.Name, where)
	}
	for _, s := range jobs {
		if err := waitFor(s, env.Client, w, start); err != nil {
			return nil, err
		}
	}
	records, err := db.Open(ctx, dsn, db.Options{})
	if err != nil {
		return nil, err
	}
	defer records.Close()
	var out []jobSummary
	for _, s := range jobs {
		js, err := summarise(ctx, records, s.job)
		if err != nil {
			return nil, err
		}
		js.Deleted = s.deleteWhenRunning
		out = append(out, js)
	}
	step(w, start, "done: every job archived")
	printSummary(w, out)
	if err := printAudit(ctx, w, dsn); err != nil {
		return nil, err
	}
	if o.Explore {
		fmt.Fprintln(w, "\nExplore:")
		for _, c := range exploreCommands(env, a, dsn, ns, o, out, rd) {
			fmt.Fprintln(w, "  "+c)
		}
	}
	return &result{Jobs: out, DSN: dsn, Archiver: a, RealNode: rn}, nil
}

// newReader binds viewer to the ClusterRole view in namespace ns (which config/apiserver
// aggregates archive reads into), writes its kubeconfig, and builds kubectl-jobvault into dir/bin.
func newReader(t testbed.T, env *testbed.Env, ns, dir string) (reader, error) {
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "demo-view-bob", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: viewer}}}
	if err := env.Client.Create(context.Background(), binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return reader{}, fmt.Errorf("bind %s to view in %s: %w", viewer, ns, err)
	}
	r := reader{Kubeconfig: env.UserKubeconfig(t, viewer, "data-science"), BinDir: filepath.Join(dir, "bin")}
	// Built with the go command, as `make demo` runs the demo: the plugin stays in dir/bin, for
	// use against any cluster, after the demo stops.
	build := exec.Command("go", "build", "-o", filepath.Join(r.BinDir, "kubectl-jobvault"), "./archiver/kubectl-jobvault")
	build.Dir = testbed.ModuleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return reader{}, fmt.Errorf("build kubectl-jobvault: %w\n%s", err, out)
	}
	return r, nil
}

// deletedJobLog returns the deleted job and the name of the pod whose current log the demo reads
// back through the archive API: the first by name with a stored log.
func deletedJobLog(jobs []jobSummary) (jobSummary, string, bool) {
	for _, j := range jobs {
		if !j.Deleted {
			continue
		}
		if len(j.LogPods) > 0 {
			return j, j.LogPods[0], true
		}
	}
	return jobSummary{}, "", false
}

// exploreCommands are the commands the demo prints for a look around, each to be run as printed
// from the repository's root (TestDemo runs them).
func exploreCommands(env *testbed.Env, a *stack.Archiver, dsn, ns string, o options, jobs []jobSummary, rd reader) []string {
	jobUID := jobs[0].UID
	cmds := []string{
		fmt.Sprintf("export KUBECONFIG=%s; kubectl get vcjob -n %s -o yaml", env.KubeconfigPath, ns),
		fmt.Sprintf("psql '%s' -c 'SELECT * FROM audit_submissions'", dsn),
	}
	if o.Backend != objstore.BackendS3 {
		cmds = append(cmds, fmt.Sprintf("find %s -type f   # the archive, browsable after the demo stops", o.FSRoot))
	}
	// verify finds the archive where the database recorded it: the store flags name the store,
	// and no --store-prefix is needed.
	verify := []string{"JOBVAULT_DB_DSN='" + dsn + "'"}
	for _, e := range a.Environ {
		name, value, _ := strings.Cut(e, "=")
		verify = append(verify, name+"='"+value+"'")
	}
	verify = append(verify, "go run ./archiver logs verify --job-uid", jobUID)
	for _, arg := range a.Args {
		if strings.HasPrefix(arg, "--store-") && !strings.HasPrefix(arg, "--store-prefix") {
			verify = append(verify, arg)
		}
	}
	cmds = append(cmds, strings.Join(verify, " "))
	// What a user with view in the namespace runs, with their own kubeconfig and the plugin on
	// their PATH, to read a job deleted from the cluster.
	asViewer := fmt.Sprintf("KUBECONFIG=%s PATH=%s:$PATH kubectl jobvault", rd.Kubeconfig, rd.BinDir)
	cmds = append(cmds, fmt.Sprintf("%s get jobs -n %s   # as %s (view in %s): the archive, deleted jobs included", asViewer, ns, viewer, ns))
	if j, pod, ok := deletedJobLog(jobs); ok {
		cmds = append(cmds, fmt.Sprintf("%s logs job/%s %s -n %s   # the deleted job's log, from the archive", asViewer, j.Name, pod, ns))
	}
	return cmds
}

func waitFor(s sample, c client.Client, w io.Writer, start time.Time) error {
	deadline := time.Now().Add(3 * time.Minute)
	deleted := false
	for time.Now().Before(deadline) {
		var j batchv1alpha1.Job
		err := c.Get(context.Background(), client.ObjectKeyFromObject(s.job), &j)
		if apierrors.IsNotFound(err) {
			step(w, start, "job %s deleted; its record and logs were archived first", s.job.Name)
			return nil
		}
		if err != nil {
			return err
		}
		s.job.UID = j.UID
		if s.deleteWhenRunning && !deleted && j.Status.State.Phase == batchv1alpha1.Running {
			if err := c.Delete(context.Background(), &j); err != nil {
				return err
			}
			deleted = true
			step(w, start, "job %s is running: deleting it, as a user cancelling it would", s.job.Name)
		}
		if j.Annotations[tracking.ArchivedAtAnnotation] != "" && len(j.Finalizers) == 0 && !s.deleteWhenRunning {
			step(w, start, "job %s ended %s and was archived to %s", s.job.Name, j.Status.State.Phase, j.Annotations[tracking.ArchiveLocationAnnotation])
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("job %s not archived within 3 minutes", s.job.Name)
}

func summarise(ctx context.Context, records *db.DB, job *batchv1alpha1.Job) (jobSummary, error) {
	row, err := records.Job(ctx, string(job.UID))
	if err != nil {
		return jobSummary{}, fmt.Errorf("record of job %s: %w", job.Name, err)
	}
	pods, err := records.Pods(ctx, row.UID)
	if err != nil {
		return jobSummary{}, err
	}
	logs, err := records.LogObjects(ctx, row.UID)
	if err != nil {
		return jobSummary{}, err
	}
	js := jobSummary{Name: row.Name, UID: row.UID, Phase: row.Phase, Submitter: row.Submitter, Location: row.ArchiveLocation,
		Retries: row.RetryCount, Pods: len(pods), Logs: len(logs)}
	names := map[string]string{}
	for _, p := range pods {
		names[p.UID] = p.Name
		if !slices.Contains(js.Nodes, p.Node) {
			js.Nodes = append(js.Nodes, p.Node)
		}
	}
	slices.Sort(js.Nodes)
	for _, l := range logs {
		if l.State != record.LogStored {
			continue
		}
		js.Keys = append(js.Keys, l.ObjectKey)
		if pod := names[l.PodUID]; l.Instance == record.InstanceCurrent && !slices.Contains(js.LogPods, pod) {
			js.LogPods = append(js.LogPods, pod)
		}
	}
	slices.Sort(js.LogPods)
	return js, nil
}

func printSummary(w io.Writer, jobs []jobSummary) {
	fmt.Fprintln(w, "\nArchived jobs:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tOUTCOME\tRETRIES\tSUBMITTER\tPODS\tLOGS\tNODES\tARCHIVE")
	for _, j := range jobs {
		outcome := j.Phase
		if j.Deleted {
			outcome = "deleted while " + j.Phase
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", j.Name, outcome, j.Retries, j.Submitter, j.Pods, j.Logs, strings.Join(j.Nodes, ","), j.Location)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nLog objects (gzip; uncompressed size and sha256 in the database):")
	for _, j := range jobs {
		for _, k := range j.Keys {
			fmt.Fprintf(w, "  %s\n", k)
		}
	}
}

// auditQuery is the compliance question the demo answers from the database alone.
const auditQuery = `SELECT name, coalesce(submitter, '?'), array_to_string(submitter_groups, ','), phase, admitted_at
  FROM audit_submissions WHERE namespace = 'demo' ORDER BY created_at, name`

func printAudit(ctx context.Context, w io.Writer, dsn string) error {
	conn, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, auditQuery)
	if err != nil {
		return fmt.Errorf("audit query: %w", err)
	}
	defer rows.Close()
	fmt.Fprintf(w, "\nAudit query: %s\n", auditQuery)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSUBMITTER\tGROUPS\tPHASE\tADMITTED")
	for rows.Next() {
		var name, submitter, groups, phase string
		var admitted sql.NullTime
		if err := rows.Scan(&name, &submitter, &groups, &phase, &admitted); err != nil {
			return err
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, submitter, groups, phase, admitted.Time.UTC().Format(time.RFC3339))
	}
	tw.Flush()
	return rows.Err()
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
