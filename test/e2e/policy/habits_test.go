package policy

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// A tenant's ordinary kubectl habits keep working under the policies: applying a changed manifest
// again, client-side or server-side, leaves jobvault's finalizer, label and annotations alone
// (kubectl removes only what it applied before; the API server does not count the webhook's
// additions as the applier's), and so do kubectl label and annotate. Replacing the job with the
// manifest would drop them, and is refused with the reason.
//
// The namespace is left out of Volcano's admission webhook, which refuses any re-apply that
// restates a VcJob's tasks (the list replaces the one Volcano defaulted), with or without jobvault.
func TestTenantKubectlHabits(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := env.NamespaceWithoutVolcanoAdmission(t)
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)
	as(t, tenant) // binds alice to cluster-admin
	kubeconfig := env.UserKubeconfig(t, tenant.name, tenant.groups...)
	kubectl := func(manifest []byte, args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = bytes.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	manifest := func(name, label string) []byte {
		t.Helper()
		j := testbed.Job(ns, name).Task("main", 1, []string{"main"}, testbed.RunsFor("1h")).Labels(map[string]string{"stage": label}).Obj()
		j.APIVersion, j.Kind = "batch.volcano.sh/v1alpha1", "Job"
		b, err := yaml.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"apply", []string{"apply", "-f", "-"}},
		{"apply-server-side", []string{"apply", "--server-side", "-f", "-"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, stage := range []string{"one", "two"} {
				if out, err := kubectl(manifest(c.name, stage), c.args...); err != nil {
					t.Fatalf("kubectl %s (stage %s): %v\n%s", strings.Join(c.args, " "), stage, err, out)
				}
			}
			j := get(t, testbed.Job(ns, c.name).Obj())
			if j.Labels["stage"] != "two" || !hasFinalizer(j, tracking.JobFinalizer) || !tracking.IsTracked(j.Labels) ||
				j.Annotations[tracking.SubmitterAnnotation] != tenant.name {
				t.Errorf("job after two applies: labels %v finalizers %v annotations %v", j.Labels, j.Finalizers, j.Annotations)
			}
		})
	}
	t.Run("label-annotate", func(t *testing.T) {
		for _, args := range [][]string{{"label", "job.batch.volcano.sh/apply", "reviewed=yes"},
			{"annotate", "job.batch.volcano.sh/apply", "team-a.example.com/ticket=42"}} {
			if out, err := kubectl(nil, append(args, "-n", ns)...); err != nil {
				t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if j := get(t, testbed.Job(ns, "apply").Obj()); !hasFinalizer(j, tracking.JobFinalizer) || j.Labels["reviewed"] != "yes" {
			t.Errorf("job after kubectl label: labels %v finalizers %v", j.Labels, j.Finalizers)
		}
	})
	t.Run("replace", func(t *testing.T) {
		before := get(t, testbed.Job(ns, "apply").Obj())
		out, err := kubectl(manifest("apply", "three"), "replace", "-f", "-")
		// The manifest lacks the finalizer, the label and the submitter annotations: refused by
		// jobvault-archiver-markers and jobvault-submitter, whichever the API server names first.
		if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'jobvault-archiver-markers'") &&
			!strings.Contains(out, "ValidatingAdmissionPolicy 'jobvault-submitter'") {
			t.Errorf("kubectl replace: %v\n%s\nwant a refusal by jobvault-archiver-markers or jobvault-submitter", err, out)
		}
		t.Logf("kubectl replace: %s", out)
		unchanged(t, env, before)
	})
}
