package archiver

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// marker is what the redaction rule records for a value outside the allow-list: its sha256.
func marker(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "redacted:sha256:" + hex.EncodeToString(sum[:])
}

// Secrets copied out: a job whose spec holds a secret wherever tenants put one (a literal env
// value, command and args, a probe's header and path, a lifecycle hook, a task template's
// annotation, a Volcano plugin's argument, the job's own annotations and kubectl's
// last-applied-configuration, which repeats them) is archived with the secret nowhere in its
// rows or its store objects. Its marker (the sha256) is there, for audits to compare, and so is
// what audits need: the image, the env names and the valueFrom reference.
func TestSecretsNotRecorded(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-literal-secret-value"
	s := stack.NewRig(t, objstore.BackendFS)
	job := testbed.Job(s.NS, "with-secret").Task("worker", 1, []string{"main"}).Obj()
	plantSecrets(job, secret)
	stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "hana", job)
	j := s.WaitArchived(t, job, 2*time.Minute)

	audit, err := sql.Open("postgres", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	var recorded string
	if err := audit.QueryRowContext(t.Context(), `
SELECT (SELECT string_agg(j::text, '') FROM jobs j WHERE uid = $1) ||
       (SELECT string_agg(a::text, '') FROM audit_submissions a WHERE uid = $1)`, string(j.UID)).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	checkNoSecret(t, "the job's rows", recorded, secret)
	jobJSON := readObject(t, s, "archive/"+j.Namespace+"/"+j.Name+"/"+string(j.UID)+"/job.json")
	checkNoSecret(t, "job.json", jobJSON, secret)

	objects := 0
	if err := s.Store.List(t.Context(), "", func(o objstore.ObjectInfo) error {
		objects++
		var text string
		if strings.HasSuffix(o.Key, ".gz") {
			b, _ := s.ReadLog(t, o.Key)
			text = string(b)
		} else {
			text = readObject(t, s, o.Key)
		}
		if strings.Contains(text, "hunter2") {
			t.Errorf("object %s holds the secret", o.Key)
		}
		return nil
	}); err != nil || objects < 3 {
		t.Fatalf("listed %d objects (%v), want job.json, manifest.json and a log", objects, err)
	}
}

// plantSecrets puts secret in the job's first container, its task template and the job.
func plantSecrets(job *batchv1alpha1.Job, secret string) {
	tmpl := &job.Spec.Tasks[0].Template
	c := &tmpl.Spec.Containers[0]
	c.Command = []string{"/bin/run", "--password=" + secret}
	c.Args = []string{secret}
	c.Env = []corev1.EnvVar{{Name: "API_TOKEN", Value: secret}, {Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz?token=" + secret, Port: intstr.FromInt32(8080),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer " + secret}}}}}
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"logout", secret}}}}
	metav1.SetMetaDataAnnotation(&tmpl.ObjectMeta, "vault.example/token", secret)
	job.Spec.Plugins = map[string][]string{"env": {"--token=" + secret}}
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, "other-tool.example/config", secret)
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, "kubectl.kubernetes.io/last-applied-configuration",
		fmt.Sprintf(`{"spec":{"tasks":[{"template":{"spec":{"containers":[{"args":[%q]}]}}}]}}`, secret))
}

// checkNoSecret checks a record for the secret, its marker, and what audits need.
func checkNoSecret(t *testing.T, what, recorded, secret string) {
	t.Helper()
	if strings.Contains(recorded, "hunter2") {
		t.Errorf("%s hold the secret:\n%s", what, recorded)
	}
	for _, want := range []string{marker(secret), marker("Bearer " + secret), "API_TOKEN", "DB_PASSWORD", "secretKeyRef", "busybox"} {
		if !strings.Contains(recorded, want) {
			t.Errorf("%s lack %q: the redaction removed too much, or did not hash:\n%s", what, want, recorded)
		}
	}
}

// readObject reads a stored object whole.
func readObject(t *testing.T, s *stack.Rig, key string) string {
	t.Helper()
	rc, err := s.Store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}
