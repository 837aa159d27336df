package webhook

import (
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	utilptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// A VcJob created by a controller, as Volcano's JobFlow or a CronJob-like operator creates one:
// its service account's token, bound to the controller's pod, and the job owned by the object
// that asked for it. The webhook records the chain of custody the API server gives: the service
// account as submitter, the token's credential ID and pod from userInfo's extra (exactly as
// SelfSubjectReview reports them), and the owner as it was at admission.
func TestWebhookRecordsChainOfCustody(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { stack.ReleaseNamespace(t, env, ns) })
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)

	c := controllerClient(t, env, ns, "flow-controller")
	who := whoAmI(t, c)
	if who.Username != "system:serviceaccount:"+ns+":flow-controller" || len(who.Extra["authentication.kubernetes.io/pod-name"]) != 1 {
		t.Fatalf("authenticated as %+v, want the service account with its pod", who)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-flow"}}
	if err := env.Client.Create(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: utilptr.To(true)}
	job := testbed.Job(ns, "nightly-1").Task("main", 1, []string{"main"}).Obj()
	job.OwnerReferences = []metav1.OwnerReference{ref}
	before := time.Now()
	if err := c.Create(t.Context(), job); err != nil {
		t.Fatalf("create VcJob as the controller: %v", err)
	}
	var stored batchv1alpha1.Job
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &stored); err != nil {
		t.Fatal(err)
	}
	checkStamped(t, &stored, who, before, time.Now())
	want := map[string]string{tracking.SubmittedForAnnotation: "v1 ConfigMap nightly-flow " + string(owner.UID) + " controller"}
	for _, e := range tracking.SubmitterExtras {
		if v := who.Extra[e.Extra]; len(v) > 0 {
			want[e.Annotation] = strings.Join(v, ",")
		}
	}
	if want["jobvault.io/submitter-pod-uid"] == "" {
		t.Fatalf("the token's userInfo has no pod UID: %+v", who.Extra)
	}
	for k, v := range want {
		if got := stored.Annotations[k]; got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, e := range tracking.SubmitterExtras {
		if _, ok := want[e.Annotation]; !ok && stored.Annotations[e.Annotation] != "" {
			t.Errorf("%s = %q, but the request has no %s", e.Annotation, stored.Annotations[e.Annotation], e.Extra)
		}
	}
}

// controllerClient returns a client authenticated as service account sa of ns with a token
// bound to a pod of that service account (the controller's), as a controller in the cluster
// authenticates; the account is admin of ns.
func controllerClient(t *testing.T, env *testbed.Env, ns, sa string) client.Client {
	t.Helper()
	ctx := t.Context()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-0"},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "manager", Image: "controller"}}}}
	for _, o := range []client.Object{account, binding, pod} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: utilptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}}
	if err := env.Client.SubResource("token").Create(ctx, account, tr); err != nil {
		t.Fatalf("request a token for %s: %v", sa, err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
