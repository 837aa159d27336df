package policy

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/stack"
)

// TestRetentionDocExample runs the example of docs/audit.md's retention policy as printed, with
// kubectl, on a namespace of the name it uses: as an operator named in the operators ConfigMap it
// sets the namespace's retention; as the tenant the same command is refused by jobvault-legal-hold.
func TestRetentionDocExample(t *testing.T) {
	t.Parallel()
	env := policies(t)
	const name = "team-a" // the example's namespace
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), ns) })
	lines := stack.DocLines(stack.DocBlock(t, "docs/audit.md", "### Policy", "sh"))
	if len(lines) != 1 || !strings.Contains(lines[0], "namespace "+name) {
		t.Fatalf("docs/audit.md's retention example: %q, want one kubectl annotate of namespace %s", lines, name)
	}
	run := func(u user) (string, error) {
		as(t, u) // bound to cluster-admin: a refusal is the policy's
		cmd := exec.CommandContext(t.Context(), "bash", "-c", lines[0])
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.UserKubeconfig(t, u.name, u.groups...))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(tenant); err == nil || !strings.Contains(out, "only by the operators named in ConfigMap") {
		t.Errorf("%q as the tenant: %v, want refused by jobvault-legal-hold\n%s", lines[0], err, out)
	}
	if out, err := run(operator); err != nil {
		t.Fatalf("%q as an operator: %v\n%s", lines[0], err, out)
	}
	var got corev1.Namespace
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &got); err != nil || got.Annotations[retentionKey] != "2160h" {
		t.Errorf("namespace %s retention %q (%v), want 2160h", name, got.Annotations[retentionKey], err)
	}
}
