package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// plantSecret puts secret in every place of a VcJob where tenants are known to put secrets (the
// issue's list and a few more): command and args, literal env values, probe headers, paths, ports
// and commands, lifecycle hooks, CSI volumeAttributes, flexVolume options, host aliases, the task
// template's annotations, Volcano plugin arguments and the job's own annotations, among them
// kubectl's copy of the whole object. It appends a task, so the job's own tasks stay as they were.
func plantSecret(job *batchv1alpha1.Job, secret string) {
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz?token=" + secret, Port: intstr.FromString(secret),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer " + secret}}}}}
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check", "--password=" + secret}}}}
	c := corev1.Container{Name: "main", Image: "registry.example/train:1",
		Command: []string{"/bin/run", "--password=" + secret}, Args: []string{secret},
		Env: []corev1.EnvVar{{Name: "API_TOKEN", Value: secret},
			{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}},
		LivenessProbe: probe, ReadinessProbe: exec, StartupProbe: probe,
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"login", secret}}},
			PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/" + secret,
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Token", Value: secret}}}}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
	}
	job.Spec.Tasks = append(job.Spec.Tasks, batchv1alpha1.TaskSpec{Name: "planted", Replicas: 1, Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"vault.example/token": secret}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{c}, Containers: []corev1.Container{c},
			HostAliases: []corev1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{secret}}},
			Volumes: []corev1.Volume{
				{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io",
					VolumeAttributes: map[string]string{"password": secret}}}},
				{Name: "flex", VolumeSource: corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{Driver: "example/flex",
					Options: map[string]string{"key": secret}}}},
			}}}})
	if job.Spec.Plugins == nil {
		job.Spec.Plugins = map[string][]string{}
	}
	job.Spec.Plugins["env"] = append(job.Spec.Plugins["env"], "--token="+secret)
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, lastAppliedAnnotation, `{"spec":{"args":["`+secret+`"]}}`)
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, "other-tool.example/config", secret)
}

// sha256Marker is what the rule says a dropped value becomes, computed here independently of
// redact.go: the value's sha256, so that audits can still compare it with a value they know.
func sha256Marker(v string) string { return "redacted:sha256:" + sha256Hex(v) }

func sha256Hex(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])
}

// A secret in any field outside the allow-list is recorded as its sha256 marker only, while the
// fields audits need (image, env names and valueFrom references, resources, volume drivers,
// queue, labels, jobvault's own annotations, the status) are recorded as they are.
func TestRedactDropsSecretsOutsideAllowList(t *testing.T) {
	const secret = "hunter2-literal-secret-value"
	job := &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: "uid-1",
			Labels:      map[string]string{"team": "vision"},
			Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}},
		Spec:   batchv1alpha1.JobSpec{Queue: "research", SchedulerName: "volcano"},
		Status: batchv1alpha1.JobStatus{State: batchv1alpha1.JobState{Phase: batchv1alpha1.Running, Message: "running"}},
	}
	plantSecret(job, secret)
	Job(job)
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "hunter2") {
		t.Errorf("the redacted job holds the secret:\n%s", got)
	}
	if !strings.Contains(got, sha256Marker(secret)) {
		t.Errorf("the redacted job lacks the secret's marker %s:\n%s", sha256Marker(secret), got)
	}
	for _, want := range []string{`"image":"registry.example/train:1"`, `"name":"API_TOKEN"`, `"name":"DB_PASSWORD"`,
		`"secretKeyRef":{"name":"db","key":"password"}`, `"cpu":"2"`, `"driver":"secrets-store.csi.k8s.io"`,
		`"driver":"example/flex"`, `"queue":"research"`, `"team":"vision"`, `"jobvault.io/submitter":"alice"`,
		`"message":"running"`, `"name":"csi"`, `"env":[`, `"vault.example/token":"redacted:sha256:`,
		`"value":"` + sha256Marker("Bearer "+secret) + `"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the redacted job lacks %s, which audits need:\n%s", want, got)
		}
	}
}

// markers finds the markers in recorded JSON, to look past them for a leaked value: a hash in
// hex may contain a short value by chance.
var markers = regexp.MustCompile(`redacted:sha256:[0-9a-f]{64}`)

// FuzzRedact: whatever VcJob a tenant submits, the recorded copy keeps a string only where the
// allow-list says so, and records every other as its sha256 marker. Three proofs per input:
//   - leaf by leaf, walking the job's JSON (not redact's reflection over the Go types): each
//     string is either unchanged on a kept path (or already a marker, or empty), or its marker
//     on any other path; nothing else changes;
//   - a fuzzed secret planted in every place tenants put secrets (plantSecret) appears nowhere in
//     the recorded JSON, raw or escaped, and its marker does;
//   - redacting the recorded copy again changes nothing.
func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"train","annotations":{"jobvault.io/submitter":"alice","note":"x"},"labels":{"a":"b"}},`+
		`"spec":{"queue":"q","plugins":{"env":["--k=v"]},"tasks":[{"name":"w","template":{"metadata":{"annotations":{"t":"s"}},`+
		`"spec":{"containers":[{"name":"main","image":"busybox","args":["--password=p"],"env":[{"name":"A","value":"v"}],`+
		`"resources":{"limits":{"cpu":"1.5"}},"livenessProbe":{"httpGet":{"port":"http","httpHeaders":[{"name":"h","value":"v"}]}}}],`+
		`"volumes":[{"name":"v","csi":{"driver":"d","volumeAttributes":{"k":"v"}}}]}}}]},"status":{"state":{"phase":"Running"}}}`),
		"correct-horse-battery-staple")
	f.Add([]byte(`{}`), "redacted:sha256:0000000000000000000000000000000000000000000000000000000000000000")
	f.Add([]byte(`{"metadata":{"annotations":{"x":"redacted:sha256:0000000000000000000000000000000000000000000000000000000000000000"}}}`), "<script>&\u2028")
	f.Add([]byte(`{"spec":{"tasks":[{"template":{"spec":{"initContainers":[{"command":["sh"],"lifecycle":{"preStop":{"exec":{"command":["x"]}}}}],`+
		`"hostAliases":[{"ip":"1.2.3.4","hostnames":["h"]}],"volumes":[{"flexVolume":{"driver":"f","options":{"o":"p"}}}]}}}]}}`), "\xff\xfeinvalid utf8")

	f.Fuzz(func(t *testing.T, spec []byte, secret string) {
		var job batchv1alpha1.Job
		if json.Unmarshal(spec, &job) != nil {
			return
		}
		job.ManagedFields = nil // recordable drops them before redacting
		recorded := job.DeepCopy()
		Job(recorded)
		checkLeaves(t, "", genericJSON(t, &job), genericJSON(t, recorded))

		again := recorded.DeepCopy()
		Job(again)
		if a, b := mustJSON(t, again), mustJSON(t, recorded); a != b {
			t.Errorf("redacting the recorded job again changed it:\n got %s\nwant %s", a, b)
		}

		if len(secret) < 8 || markerPattern.MatchString(secret) {
			return // too short to tell from the rest, or a marker, which the rule keeps
		}
		escaped := mustJSON(t, secret)
		escaped = escaped[1 : len(escaped)-1]
		leaks := func(s string) bool { return strings.Contains(s, secret) || strings.Contains(s, escaped) }
		control := job.DeepCopy()
		plantSecret(control, "zz-control-zz")
		Job(control)
		if leaks(markers.ReplaceAllString(mustJSON(t, control), "")) {
			return // the value is part of the job's kept fields, or of the planted job's own text
		}
		planted := job.DeepCopy()
		plantSecret(planted, secret)
		Job(planted)
		out := mustJSON(t, planted)
		if leaks(markers.ReplaceAllString(out, "")) {
			t.Errorf("the recorded job leaks %q:\n%s", secret, out)
		}
		if !strings.Contains(out, sha256Marker(secret)) {
			t.Errorf("the recorded job lacks the marker of %q, which audits compare:\n%s", secret, out)
		}
	})
}

// checkLeaves compares the JSON of a job (in) and of its redacted copy (out) at path: the same
// shape, and each string as the rule says.
func checkLeaves(t *testing.T, path string, in, out any) {
	t.Helper()
	switch in := in.(type) {
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok || len(o) != len(in) {
			t.Fatalf("%s: %v recorded as %v", path, in, out)
		}
		for k, v := range in {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			checkLeaves(t, sub, v, o[k])
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(in) {
			t.Fatalf("%s: %v recorded as %v", path, in, out)
		}
		for i := range in {
			checkLeaves(t, path, in[i], o[i])
		}
	case string:
		switch {
		case in == "" || markerPattern.MatchString(in) || kept(path):
			if out != in {
				t.Errorf("%s: %q recorded as %q, want it kept", path, in, out)
			}
		case out != sha256Marker(in):
			t.Errorf("%s is not on the allow-list: %q recorded as %q, want %q", path, in, out, sha256Marker(in))
		}
	default:
		if !cmp.Equal(in, out) {
			t.Errorf("%s: %v recorded as %v", path, in, out)
		}
	}
}

func genericJSON(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(mustJSON(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
