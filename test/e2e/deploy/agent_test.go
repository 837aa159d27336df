package deploy

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// agentPod returns the node agent DaemonSet's pod spec and its container, nil if objs has none.
func agentPod(t *testing.T, objs []*unstructured.Unstructured) (*corev1.PodSpec, *corev1.Container) {
	t.Helper()
	d := find(objs, "DaemonSet", "jobvault-agent")
	if d == nil {
		return nil, nil
	}
	spec := podTemplate(t, d)
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "agent" {
		t.Fatalf("DaemonSet jobvault-agent: containers %+v, want one named agent", spec.Containers)
	}
	return spec, &spec.Containers[0]
}

// checkAgentDaemonSet: the node agent (issue 25) runs the archiver's agent mode on every node,
// tainted ones included, at its own priority, knows its node from the downward API, reads
// /var/log/pods read-only and nothing else of the host, runs as root with every capability
// dropped but CAP_DAC_READ_SEARCH on a read-only root filesystem, has resource limits, takes its
// database settings from its own Secret, and has no API token.
func checkAgentDaemonSet(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	spec, c := agentPod(t, objs)
	if c == nil {
		return
	}
	if len(c.Command) != 1 || !strings.HasSuffix(c.Command[0], "/archiver") || len(c.Args) == 0 || c.Args[0] != "agent" ||
		!slices.Contains(c.Args, "--node=$(NODE_NAME)") || !slices.Contains(c.Args, "--pod-logs-dir=/var/log/pods") {
		t.Errorf("agent command %q args %q: want the archiver's agent mode with --node=$(NODE_NAME) --pod-logs-dir=/var/log/pods", c.Command, c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent env NODE_NAME %+v: want the downward API's spec.nodeName", e)
	}
	for _, name := range []string{"JOBVAULT_DB_DSN", "PGPASSWORD"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "jobvault-agent-db" {
			t.Errorf("agent env %s %+v: want it from the Secret jobvault-agent-db (its own database role)", name, e)
		}
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Operator == corev1.TolerationOpExists && tl.Key == "" }) {
		t.Errorf("agent tolerations %+v: want every taint tolerated (operator Exists, no key)", spec.Tolerations)
	}
	if pc := find(objs, "PriorityClass", spec.PriorityClassName); pc == nil {
		t.Errorf("agent priorityClassName %q is not rendered", spec.PriorityClassName)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("agent automountServiceAccountToken %v: want false (it needs no API rights)", spec.AutomountServiceAccountToken)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("agent shares the host's network, PID or IPC namespace")
	}
	var hostPaths []string
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.Name+":"+v.HostPath.Path)
		}
	}
	if !slices.Equal(hostPaths, []string{"pod-logs:/var/log/pods"}) {
		t.Errorf("agent hostPath volumes %q: want /var/log/pods alone", hostPaths)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "pod-logs" && (!m.ReadOnly || m.MountPath != "/var/log/pods") {
			t.Errorf("agent mounts the pod logs %+v: want read-only at /var/log/pods", m)
		}
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("agent pod securityContext %+v: want runAsUser 0 and seccomp RuntimeDefault", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"DAC_READ_SEARCH"}) {
		t.Errorf("agent securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL, add DAC_READ_SEARCH alone", sc)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("agent resources %+v: want a memory request and memory and CPU limits", c.Resources)
	}
	if c.LivenessProbe != nil {
		t.Errorf("agent has a liveness probe: a restart closes the descriptors that keep deleted files")
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "health" {
		t.Errorf("agent readiness probe %+v: want /healthz on port health", p)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--db-dsn") || strings.Contains(strings.ToLower(a), "password") || strings.Contains(a, "secret-key=") {
			t.Errorf("agent arg %q carries a secret on the command line", a)
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, b := range ofKind(objs, kind) {
			subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
			for _, s := range subjects {
				if s.(map[string]any)["name"] == spec.ServiceAccountName {
					t.Errorf("%s %s binds the agent's ServiceAccount: it needs no API rights", kind, b.GetName())
				}
			}
		}
	}
}

// TestDeployAgentRBAC installs config/agent's Namespace and ServiceAccount for real and asks the
// API server (SubjectAccessReview) what the agent's ServiceAccount may do: nothing it could ask.
func TestDeployAgentRBAC(t *testing.T) {
	env := testbed.Cluster(t)
	ensureNamespace(t, env, "agent", agentNamespace)
	sa := find(stack.Kustomize(t, "agent"), "ServiceAccount", "jobvault-agent")
	if sa == nil {
		t.Fatal("config/agent renders no ServiceAccount jobvault-agent")
	}
	if out, errOut, err := kubectl(t, env, toYAMLStream(t, []*unstructured.Unstructured{sa}), "apply", "--server-side", "--field-manager=jobvault-deploy-test", "-f", "-"); err != nil {
		t.Fatalf("apply the agent's ServiceAccount: %v\n%s%s", err, out, errOut)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), sa); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete ServiceAccount %s: %v", sa.GetName(), err)
		}
	})
	user := "system:serviceaccount:" + agentNamespace + ":jobvault-agent"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"}
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "pods", Namespace: "team-a", Name: "train-worker-0"},
		{Verb: "list", Resource: "pods"},
		{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "team-a", Name: "train-worker-0"},
		{Verb: "get", Resource: "nodes", Name: "node-1"},
		{Verb: "get", Resource: "secrets", Namespace: agentNamespace, Name: "jobvault-agent-db"},
		{Verb: "list", Group: "batch.volcano.sh", Resource: "jobs"},
		{Verb: "create", Resource: "events", Namespace: agentNamespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: agentNamespace, Name: "x"},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if sar.Status.Allowed {
			t.Errorf("the agent may %s %s/%s %s/%s, which it does not need", a.Verb, a.Resource, a.Subresource, a.Namespace, a.Name)
		}
	}
	// The check can fail: the testbed's admin may.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "admin", Groups: []string{"system:masters"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}}}
	if err := env.Client.Create(t.Context(), sar); err != nil || !sar.Status.Allowed {
		t.Errorf("SubjectAccessReview of system:masters listing pods: allowed %t (%v), want allowed", sar.Status.Allowed, err)
	}
}

// TestDeployAgentFlags runs the real archiver binary with the agent DaemonSet's arguments followed
// by -help: exit 0 proves that "agent" is its mode and every argument a flag of it with a
// well-formed value (the flag package parses each before it reaches -help).
func TestDeployAgentFlags(t *testing.T) {
	_, c := agentPod(t, stack.Kustomize(t, "agent"))
	if c == nil {
		t.Fatal("config/agent renders no DaemonSet jobvault-agent")
	}
	bin := testbed.GoBuild(t, "./archiver")
	out, err := exec.CommandContext(t.Context(), bin, append(slices.Clone(c.Args), "-help")...).CombinedOutput()
	if err != nil {
		t.Errorf("archiver %s -help: %v\n%s", strings.Join(c.Args, " "), err, flagError(string(out)))
	}
	// The check can fail: a flag the agent does not have is refused.
	if err := exec.CommandContext(t.Context(), bin, "agent", "--no-such-flag=1", "-help").Run(); err == nil {
		t.Error("archiver agent --no-such-flag=1 -help succeeded: the check cannot fail")
	}
}
