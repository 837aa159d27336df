package policy

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

const (
	deployNamespace = "jobvault-system"
	// operatorsConfigMap holds the parameters of policy jobvault-release.
	operatorsConfigMap = "jobvault-release-operators"
	// probeNamespace holds the objects of the probes that wait for the policies to be in force.
	probeNamespace = "policy-probe"
)

// The users of the tests. Every user but the archiver is bound to cluster-admin
// (testbed.Env.UserConfig): RBAC lets each do anything, so every refusal is the policies'.
var (
	tenant    = user{name: "alice", groups: []string{"team-a"}}
	operator  = user{name: "olga", groups: []string{"sre"}}                    // named in users
	opByGroup = user{name: "greg", groups: []string{"team-b", "jobvault-ops"}} // named through groups
	clusterAd = user{name: "rita", groups: []string{"platform-admins"}}        // an admin named nowhere
	archiver  = user{name: stack.ArchiverUser}                                 // config/archiver's RBAC only
)

// operatorParams is the data the tests give the operators ConfigMap: one name per line, with a
// blank line and surrounding spaces that must be ignored.
var operatorParams = map[string]string{"users": "  olga\n\nsomeone-else\n", "groups": "jobvault-ops\n"}

type user struct {
	name   string
	groups []string
}

var (
	clientsMu sync.Mutex
	clients   = map[string]client.Client{}
)

// as returns a client authenticated as u: the archiver with ArchiverIdentity's kubeconfig (the
// ClusterRole it ships with), anyone else bound to cluster-admin.
func as(t *testing.T, u user) client.Client {
	t.Helper()
	env := testbed.Cluster(t)
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if c, ok := clients[u.name]; ok {
		return c
	}
	var cfg *rest.Config
	if u.name == stack.ArchiverUser {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", stack.ArchiverIdentity(t, env)); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg = env.UserConfig(t, u.name, u.groups...)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	clients[u.name] = c
	return c
}

var (
	installMu sync.Mutex
	installed bool
)

// policies installs config/policy once per process, as `kubectl apply --server-side -k` would,
// names the test operators in its ConfigMap, and waits until every policy is in force. It returns
// the testbed.
func policies(t *testing.T) *testbed.Env {
	t.Helper()
	env := testbed.Cluster(t)
	installMu.Lock()
	defer installMu.Unlock()
	if installed {
		return env
	}
	ctx := context.Background()
	for _, ns := range []string{deployNamespace, probeNamespace} {
		err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	startPolicyStatusController(t, env)
	objs := stack.Kustomize(t, "policy")
	apply(t, env, objs)

	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: deployNamespace, Name: operatorsConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data = operatorParams
	if err := env.Client.Patch(ctx, &cm, patch); err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			names = append(names, o.GetName())
		}
	}
	waitTypeChecked(t, env, names)
	waitInForce(t, env)
	installed = true
	return env
}

// startPolicyStatusController runs kube-controller-manager's
// validatingadmissionpolicy-status-controller, which the testbed's kube-controller-manager does
// not run: it type-checks each policy against the schemas of the kinds it matches and writes the
// result to status.typeChecking, as in a cluster.
func startPolicyStatusController(t *testing.T, env *testbed.Env) {
	t.Helper()
	stack.StartControllers(t, env, "kube-controller-manager-vap-status", "validatingadmissionpolicy-status-controller")
}

// apply applies the objects with kubectl's server-side apply; a warning fails the test (an unknown
// field dropped, a deprecated API).
func apply(t *testing.T, env *testbed.Env, objs []*unstructured.Unstructured) {
	t.Helper()
	var in bytes.Buffer
	for _, o := range objs {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteString("\n")
	}
	cmd := exec.CommandContext(t.Context(), "kubectl", "--kubeconfig", env.KubeconfigPath,
		"apply", "--server-side", "--field-manager=jobvault-policy-e2e", "-f", "-")
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl apply config/policy: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "Warning") {
		t.Fatalf("kubectl apply config/policy: the API server warned:\n%s", stderr.String())
	}
}

// waitTypeChecked waits until the API server has type-checked the current generation of every
// policy against the schemas of the kinds it matches (pods, and the testbed's VcJob CRD), and
// fails on any warning: a misspelt field or a wrong type.
func waitTypeChecked(t *testing.T, env *testbed.Env, names []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
				t.Fatal(err)
			}
			if p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil {
				for _, w := range p.Status.TypeChecking.ExpressionWarnings {
					t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("policy %s: not type-checked after a minute (status %+v)", name, p.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// probe is a request that the policy must refuse, or (policy "") pass, once in force.
type probe struct {
	policy string
	do     func(ctx context.Context) error
}

// waitInForce polls, with dry-run requests, until each policy refuses what it must and the
// operators ConfigMap's content is seen: the API server loads policies, bindings and parameters
// asynchronously.
func waitInForce(t *testing.T, env *testbed.Env) {
	t.Helper()
	ctx := context.Background()
	admin := env.Client
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: "target"},
		Spec: corev1.PodSpec{SchedulerName: "none", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if err := admin.Create(ctx, target); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := func(annotations map[string]string) *corev1.Pod {
		p := target.DeepCopy()
		p.Name, p.ResourceVersion, p.Annotations = "", "", annotations
		p.GenerateName = "probe-"
		return p
	}
	job := func(mutate func(*batchv1alpha1.Job)) *batchv1alpha1.Job {
		j := testbed.Job(probeNamespace, "").Task("main", 1, []string{"main"}).Obj()
		j.Name, j.GenerateName = "", "probe-"
		mutate(j)
		return j
	}
	probes := []probe{
		{"jobvault-archiver-markers", func(ctx context.Context) error {
			return admin.Create(ctx, pod(map[string]string{tracking.ArchivedAtAnnotation: "2025-01-01T00:00:00Z"}), client.DryRunAll)
		}},
		{"jobvault-submitter", func(ctx context.Context) error {
			return admin.Create(ctx, job(func(j *batchv1alpha1.Job) {
				j.Annotations = map[string]string{tracking.SubmitterAnnotation: "someone-else"}
			}), client.DryRunAll)
		}},
		{"jobvault-release-templates", func(ctx context.Context) error {
			return admin.Create(ctx, job(func(j *batchv1alpha1.Job) {
				j.Spec.Tasks[0].Template.Annotations[tracking.ReleaseAnnotation] = "probe"
			}), client.DryRunAll)
		}},
		{"jobvault-release", func(ctx context.Context) error {
			return admin.Create(ctx, pod(map[string]string{tracking.ReleaseAnnotation: "probe"}), client.DryRunAll)
		}},
		{"jobvault-legal-hold", func(ctx context.Context) error {
			return admin.Create(ctx, job(func(j *batchv1alpha1.Job) {
				j.Annotations = map[string]string{"jobvault.io/legal-hold": "probe"}
			}), client.DryRunAll)
		}},
		// The operators named in the ConfigMap, by user and by group, pass.
		{"", func(ctx context.Context) error {
			return as(t, operator).Create(ctx, pod(map[string]string{tracking.ReleaseAnnotation: "probe"}), client.DryRunAll)
		}},
		{"", func(ctx context.Context) error {
			return as(t, opByGroup).Create(ctx, pod(map[string]string{tracking.ReleaseAnnotation: "probe"}), client.DryRunAll)
		}},
		{"jobvault-archiver-scope", func(ctx context.Context) error {
			p := target.DeepCopy()
			patch := client.MergeFrom(target.DeepCopy())
			p.Spec.Containers[0].Image = "evil"
			return as(t, archiver).Patch(ctx, p, patch, client.DryRunAll)
		}},
		{"jobvault-pod-owner", func(ctx context.Context) error {
			p := pod(nil)
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch.volcano.sh/v1alpha1", Kind: "Job", Name: "../probe", UID: "1", Controller: ptr.To(true)}}
			return admin.Create(ctx, p, client.DryRunAll)
		}},
		{"jobvault-release-operators-kept", func(ctx context.Context) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: deployNamespace, Name: operatorsConfigMap}}
			return admin.Delete(ctx, cm, client.DryRunAll)
		}},
	}
	for _, p := range probes {
		var last error
		deadline := time.Now().Add(30 * time.Second)
		for {
			last = p.do(ctx)
			if p.policy == "" && last == nil || p.policy != "" && deniedBy(last, p.policy) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("policy %q not in force after 30 s: last answer %v", p.policy, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// deniedBy reports whether err is a refusal by the policy (and its binding of the same name).
func deniedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) &&
		strings.Contains(err.Error(), fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request", policy, policy))
}

// expectDenied asserts that err is a refusal by policy whose message holds every one of want.
func expectDenied(t *testing.T, err error, policy string, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("allowed, want a refusal by policy %s", policy)
		return
	}
	if !deniedBy(err, policy) {
		t.Errorf("error %v, want a refusal by policy %s", err, policy)
		return
	}
	t.Logf("refused: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err.Error(), w)
		}
	}
}

// unchanged asserts that obj is stored as it was before a refused request: metadata and spec (its
// status is Volcano's and the node's, who keep updating it).
func unchanged(t *testing.T, env *testbed.Env, before client.Object) {
	t.Helper()
	after := before.DeepCopyObject().(client.Object)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(before), after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(content(t, before), content(t, after)); diff != "" {
		t.Errorf("%s changed by a refused request (-before +after):\n%s", before.GetName(), diff)
	}
}

// content is obj without its status and the metadata every write changes.
func content(t *testing.T, obj client.Object) map[string]any {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	delete(u, "status")
	for _, f := range []string{"resourceVersion", "managedFields", "generation"} {
		unstructured.RemoveNestedField(u, "metadata", f)
	}
	return u
}

// patchAs changes a fresh copy of obj with change and sends it as a merge patch as u, with an
// optimistic lock as the archiver does, again on a conflict (Volcano and the node keep updating
// the status). obj is left as it was.
func patchAs(t *testing.T, u user, obj client.Object, change func(client.Object)) error {
	t.Helper()
	return patchWith(t, obj, change, func(cur client.Object, patch client.Patch) error {
		return as(t, u).Patch(t.Context(), cur, patch)
	})
}

// statusPatchAs is patchAs through the status subresource.
func statusPatchAs(t *testing.T, u user, obj client.Object, change func(client.Object)) error {
	t.Helper()
	return patchWith(t, obj, change, func(cur client.Object, patch client.Patch) error {
		return as(t, u).Status().Patch(t.Context(), cur, patch)
	})
}

func patchWith(t *testing.T, obj client.Object, change func(client.Object), send func(client.Object, client.Patch) error) error {
	t.Helper()
	env := testbed.Cluster(t)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			t.Fatal(err)
		}
		base := cur.DeepCopyObject().(client.Object)
		change(cur)
		return send(cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
}

// get reads obj as stored now.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	if err := testbed.Cluster(t).Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// webhookNamespace is a fresh namespace with jobvault's webhook registered for it.
func webhookNamespace(t *testing.T, env *testbed.Env) string {
	t.Helper()
	ns := env.Namespace(t)
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)
	return ns
}

// runningJob creates a VcJob of one pod that runs for an hour, as u, and waits until its pod
// (with jobvault's finalizer, where the webhook runs) is bound and running, so that only its status
// changes while the test runs. It returns both as stored.
func runningJob(t *testing.T, u user, ns, name string, opts ...testbed.PodOption) (*batchv1alpha1.Job, *corev1.Pod) {
	t.Helper()
	env := testbed.Cluster(t)
	job := testbed.Job(ns, name).Task("main", 1, []string{"main"}, append([]testbed.PodOption{testbed.RunsFor("1h")}, opts...)...).Obj()
	if err := as(t, u).Create(t.Context(), job); err != nil {
		t.Fatalf("create job %s as %s: %v", name, u.name, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: testbed.PodName(name, "main", 0)}}
	deadline := time.Now().Add(time.Minute)
	for {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod)
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			break
		}
		if err != nil && !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("pod %s of job %s not running after a minute (phase %q): %v", pod.Name, name, pod.Status.Phase, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return get(t, job), pod
}

// hasFinalizer reports whether obj lists f.
func hasFinalizer(obj client.Object, f string) bool { return slices.Contains(obj.GetFinalizers(), f) }
