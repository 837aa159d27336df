package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	utilptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/certs/certgen"
	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// whoAmI returns the identity the API server gives c's credentials.
func whoAmI(t *testing.T, c client.Client) authenticationv1.UserInfo {
	t.Helper()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(t.Context(), review); err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo
}

// checkStamped checks everything the VcJob webhook adds, for the user who created job.
func checkStamped(t *testing.T, job *batchv1alpha1.Job, user authenticationv1.UserInfo, before, after time.Time) {
	t.Helper()
	if !slices.Contains(job.Finalizers, tracking.JobFinalizer) {
		t.Errorf("finalizers = %v, want %s", job.Finalizers, tracking.JobFinalizer)
	}
	if !tracking.IsTracked(job.Labels) {
		t.Errorf("labels = %v, want %s=%s", job.Labels, tracking.TrackedLabel, tracking.TrackedValue)
	}
	// The pod templates are the user's: a VcJob's pods are recognised by their owner and Volcano's
	// label, and Volcano refuses template changes after admission anyway.
	for _, task := range job.Spec.Tasks {
		if _, ok := task.Template.Labels[tracking.TrackedLabel]; ok {
			t.Errorf("task %s template labels = %v, want none of ours", task.Name, task.Template.Labels)
		}
	}
	if got := job.Annotations[tracking.SubmitterAnnotation]; got != user.Username {
		t.Errorf("submitter = %q, want %q", got, user.Username)
	}
	var groups []string
	if err := json.Unmarshal([]byte(job.Annotations[tracking.SubmitterGroupsAnnotation]), &groups); err != nil {
		t.Errorf("submitter groups %q are not a JSON array: %v", job.Annotations[tracking.SubmitterGroupsAnnotation], err)
	} else if !slices.Equal(groups, user.Groups) {
		t.Errorf("submitter groups = %q, want %q", groups, user.Groups)
	}
	admitted, err := time.Parse(time.RFC3339, job.Annotations[tracking.AdmittedAtAnnotation])
	if err != nil || !strings.HasSuffix(job.Annotations[tracking.AdmittedAtAnnotation], "Z") {
		t.Errorf("admitted-at %q is not RFC 3339 UTC: %v", job.Annotations[tracking.AdmittedAtAnnotation], err)
	} else if admitted.Before(before.Truncate(time.Second)) || admitted.After(after) {
		t.Errorf("admitted-at %v is outside the create call [%v, %v]", admitted, before, after)
	}
}

// Two users create VcJobs; each comes back from the API server with the finalizer, the tracking
// labels and that user's identity exactly as the API server authenticated it.
func TestWebhookStampsSubmitter(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { stack.ReleaseNamespace(t, env, ns) })
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)

	for _, u := range []struct {
		name   string
		groups []string
	}{{"alice", []string{"team-a"}}, {"bob", []string{"team-b", "auditors"}}} {
		t.Run(u.name, func(t *testing.T) {
			c, err := client.New(env.UserConfig(t, u.name, u.groups...), client.Options{Scheme: env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			who := whoAmI(t, c)
			if who.Username != u.name {
				t.Fatalf("authenticated as %q, want %q", who.Username, u.name)
			}
			job := testbed.Job(ns, "by-"+u.name).Task("main", 1, []string{"main"}).Obj()
			before := time.Now()
			if err := c.Create(t.Context(), job); err != nil {
				t.Fatalf("create VcJob as %s: %v", u.name, err)
			}
			checkStamped(t, job, who, before, time.Now())
			// What is stored, not only what the create returned.
			var stored batchv1alpha1.Job
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &stored); err != nil {
				t.Fatal(err)
			}
			checkStamped(t, &stored, who, before, time.Now())
		})
	}
}

// generateName, and everything the user set in metadata, survive; a forged submitter does not.
func TestWebhookKeepsMetadata(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { stack.ReleaseNamespace(t, env, ns) })
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)

	job := testbed.Job(ns, "").Labels(map[string]string{"team": "x"}).
		Task("worker", 1, []string{"main"}, func(p *corev1.PodTemplateSpec) { p.Labels = map[string]string{"role": "worker"} }).
		Task("ps", 1, []string{"main"}).Obj()
	job.GenerateName = "gen-"
	job.Annotations = map[string]string{"note": "keep me", tracking.SubmitterAnnotation: "mallory", tracking.AdmittedAtAnnotation: "2001-01-01T00:00:00Z"}
	job.Finalizers = []string{"example.com/keep"}
	before := time.Now()
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	checkStamped(t, job, whoAmI(t, env.Client), before, time.Now())
	if !strings.HasPrefix(job.Name, "gen-") || len(job.Name) <= len("gen-") {
		t.Errorf("name = %q, want generated from gen-", job.Name)
	}
	if want := []string{"example.com/keep", tracking.JobFinalizer}; !slices.Equal(job.Finalizers, want) {
		t.Errorf("finalizers = %v, want %v", job.Finalizers, want)
	}
	if job.Labels["team"] != "x" || job.Annotations["note"] != "keep me" {
		t.Errorf("labels %v / annotations %v lost the user's", job.Labels, job.Annotations)
	}
	if job.Spec.Tasks[0].Template.Labels["role"] != "worker" {
		t.Errorf("task template labels = %v, lost role=worker", job.Spec.Tasks[0].Template.Labels)
	}
	// The KWOK stage annotations of the templates are the user's too.
	if len(job.Spec.Tasks[1].Template.Annotations) == 0 {
		t.Errorf("task template annotations were dropped")
	}
}

// The pods Volcano creates for a VcJob get the pod finalizer, though neither they nor their
// templates carry any label of ours. A pod without Volcano's label is never sent to the webhook; a
// pod with Volcano's label copied but no VcJob controlling it, or with only our label, is left
// alone.
func TestWebhookTracksVolcanoPods(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	t.Cleanup(func() { stack.ReleaseNamespace(t, env, ns) })
	stack.ServeWebhook(t, env).Register(t, env, []string{ns}, nil)
	ctx := t.Context()

	job := testbed.Job(ns, "pods").Task("worker", 2, []string{"main"}).Obj()
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1alpha1.JobNameKey: job.Name}); err != nil {
			return false, err
		}
		return len(pods.Items) >= 2, nil
	})
	if err != nil {
		t.Fatalf("Volcano created %d pods for %s: %v", len(pods.Items), job.Name, err)
	}
	for _, p := range pods.Items {
		if _, ours := p.Labels[tracking.TrackedLabel]; ours || !slices.Contains(p.Finalizers, tracking.PodFinalizer) {
			t.Errorf("Volcano pod %s: labels %v finalizers %v, want %s and no label of ours", p.Name, p.Labels, p.Finalizers, tracking.PodFinalizer)
		}
	}

	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	copied := plain.DeepCopy()
	copied.Name, copied.Labels = "copied", pods.Items[0].Labels
	ours := plain.DeepCopy()
	ours.Name, ours.Labels = "ours", map[string]string{tracking.TrackedLabel: tracking.TrackedValue}
	for _, p := range []*corev1.Pod{plain, copied, ours} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if len(p.Finalizers) != 0 {
			t.Errorf("pod %s with labels %v and no VcJob controlling it: finalizers %v, want none", p.Name, p.Labels, p.Finalizers)
		}
	}
}

// Our webhook and Volcano's both mutate a new VcJob; the API server calls mutating webhooks in the
// order of their configurations' names. In both orders the job comes back with Volcano's defaults
// and our stamps, once, and Volcano's pods get the pod finalizer:
//   - ours first: Volcano's mutation comes after ours, so the API server calls ours again
//     (reinvocationPolicy IfNeeded), with Volcano's defaults in the object; that pass changes
//     nothing.
//   - Volcano's first: ours sees its defaults and is called once; Volcano's webhook
//     (reinvocationPolicy Never) is not called again for our metadata change, and needs not be.
func TestWebhookCoexistsWithVolcano(t *testing.T) {
	env := testbed.Cluster(t)
	s := stack.ServeWebhook(t, env)
	jobs, err := admission.NewJobMutator(clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, configPrefix string
		oursFirst          bool
	}{
		{"ours first", "jobvault-webhook-e2e-", true}, // sorts before volcano-admission-service-…
		{"Volcano's first", "zz-jobvault-webhook-e2e-", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			t.Cleanup(func() { stack.ReleaseNamespace(t, env, ns) })
			// The VcJob webhook is served through a recorder of what the API server sends it and
			// what it answers.
			var mu sync.Mutex
			var calls []jobCall
			path := fmt.Sprintf("/e2e-coexist-%d", i)
			s.Server.Register(path, &cradmission.Webhook{Handler: cradmission.HandlerFunc(
				func(ctx context.Context, req cradmission.Request) cradmission.Response {
					resp := jobs.Handle(ctx, req)
					var c jobCall
					if err := json.Unmarshal(req.Object.Raw, &c.job); err != nil {
						t.Errorf("the API server sent a VcJob that does not decode: %v", err)
					}
					c.patches = len(resp.Patches)
					mu.Lock()
					calls = append(calls, c)
					mu.Unlock()
					return resp
				})})
			s.RegisterAs(t, env, tc.configPrefix, []string{ns}, func(w *admissionregistrationv1.MutatingWebhook) {
				if strings.HasSuffix(*w.ClientConfig.URL, admission.JobPath) {
					w.ClientConfig.URL = utilptr.To("https://" + s.Addr + path)
				}
			})

			job := testbed.Job(ns, "coexist").Task("worker", 2, []string{"main"}).Obj()
			before := time.Now()
			if err := env.Client.Create(t.Context(), job); err != nil {
				t.Fatal(err)
			}
			checkStamped(t, job, whoAmI(t, env.Client), before, time.Now())
			if n := strings.Count(strings.Join(job.Finalizers, " "), tracking.JobFinalizer); n != 1 {
				t.Errorf("finalizers %v hold ours %d times, want once", job.Finalizers, n)
			}
			task := job.Spec.Tasks[0]
			if job.Spec.Queue != "default" || job.Spec.SchedulerName != "volcano" || job.Spec.MinAvailable != 2 ||
				task.MinAvailable == nil || *task.MinAvailable != 2 || task.MaxRetry != 3 {
				t.Errorf("spec queue %q scheduler %q minAvailable %d, task minAvailable %v maxRetry %d: want Volcano's defaults",
					job.Spec.Queue, job.Spec.SchedulerName, job.Spec.MinAvailable, task.MinAvailable, task.MaxRetry)
			}

			mu.Lock()
			got := slices.Clone(calls)
			mu.Unlock()
			switch {
			case tc.oursFirst && (len(got) != 2 || got[0].defaulted() || got[0].patches == 0 ||
				!got[1].defaulted() || !got[1].stamped() || got[1].patches != 0):
				t.Errorf("calls to our webhook: %v; want one before Volcano's defaults that patches, then a reinvocation with its defaults and our stamps that changes nothing", got)
			case !tc.oursFirst && (len(got) != 1 || !got[0].defaulted() || got[0].stamped() || got[0].patches == 0):
				t.Errorf("calls to our webhook: %v; want one, after Volcano's defaults, that patches", got)
			}

			var pods corev1.PodList
			err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1alpha1.JobNameKey: job.Name})
				return err == nil && len(pods.Items) == 2, err
			})
			if err != nil {
				t.Fatalf("Volcano created %d pods: %v", len(pods.Items), err)
			}
			for _, p := range pods.Items {
				if !slices.Equal(p.Finalizers, []string{tracking.PodFinalizer}) {
					t.Errorf("pod %s: finalizers %v, want [%s]", p.Name, p.Finalizers, tracking.PodFinalizer)
				}
			}
		})
	}
}

// jobCall is one call of the API server to our VcJob webhook: the job it sent, and the number of
// patch operations the webhook answered.
type jobCall struct {
	job     batchv1alpha1.Job
	patches int
}

func (c jobCall) defaulted() bool { return c.job.Spec.Queue != "" }
func (c jobCall) stamped() bool   { return slices.Contains(c.job.Finalizers, tracking.JobFinalizer) }
func (c jobCall) String() string {
	return fmt.Sprintf("{Volcano's defaults in: %v, our stamps in: %v, patch operations: %d}", c.defaulted(), c.stamped(), c.patches)
}

var jobPatchPath = regexp.MustCompile(`^/metadata/`)

// Straight to the HTTPS endpoint: a VcJob with fields newer than our volcano.sh/apis (the API server
// prunes unknown fields of the structural Volcano CRD before admission, so this is checked here)
// gets only additions under metadata; malformed requests get a 400 with the reason.
func TestWebhookHTTPS(t *testing.T) {
	env := testbed.Cluster(t)
	s := stack.ServeWebhook(t, env)
	hc := s.HTTPClient(t)
	base := "https://" + s.Addr

	jobRaw := []byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job",
	  "metadata":{"generateName":"future-","namespace":"ml"},
	  "spec":{"someFutureField":{"x":[1,2.50,9007199254740993]},"minAvailable":1,
	    "tasks":[{"name":"w","replicas":1,"futureTaskField":{"a":"b"},
	      "template":{"spec":{"containers":[{"name":"c","image":"busybox","resources":{"limits":{"cpu":"1.50"}}}]}}}]}}`)
	review := func(resource metav1.GroupVersionResource, kind metav1.GroupVersionKind, object []byte) []byte {
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "e2e-1", Kind: kind, Resource: resource, Namespace: "ml", Operation: admissionv1.Create,
				UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a"}},
				Object:   runtime.RawExtension{Raw: object},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	jobGVR := metav1.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"}
	jobGVK := metav1.GroupVersionKind{Group: "batch.volcano.sh", Version: "v1alpha1", Kind: "Job"}
	post := func(t *testing.T, method, path, contentType string, body []byte) *admissionv1.AdmissionResponse {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(raw, &out); err != nil || out.Response == nil {
			t.Fatalf("HTTP %d %q is not an AdmissionReview with a response (%v)", resp.StatusCode, raw, err)
		}
		return out.Response
	}

	t.Run("unknown fields survive", func(t *testing.T) {
		r := post(t, http.MethodPost, admission.JobPath, "application/json", review(jobGVR, jobGVK, jobRaw))
		if !r.Allowed || r.UID != "e2e-1" {
			t.Fatalf("response %+v, want allowed for uid e2e-1", r)
		}
		var ops []struct{ Op, Path string }
		if err := json.Unmarshal(r.Patch, &ops); err != nil || len(ops) == 0 {
			t.Fatalf("patch %s: %v", r.Patch, err)
		}
		for _, op := range ops {
			if op.Op != "add" || !jobPatchPath.MatchString(op.Path) {
				t.Errorf("patch operation %s %s, want only add under /metadata", op.Op, op.Path)
			}
		}
		patch, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := patch.Apply(jobRaw)
		if err != nil {
			t.Fatal(err)
		}
		for _, literal := range []string{"9007199254740993", `"1.50"`, `"futureTaskField"`, "2.50"} {
			if !bytes.Contains(patched, []byte(literal)) {
				t.Errorf("patched object lost %s: %s", literal, patched)
			}
		}
	})

	good := review(jobGVR, jobGVK, jobRaw)
	for _, tc := range []struct {
		name, method, path, contentType string
		body                            []byte
		wantMsg                         string
	}{
		{"garbage", http.MethodPost, admission.JobPath, "application/json", []byte("garbage"), "couldn't get version/kind"},
		{"truncated", http.MethodPost, admission.JobPath, "application/json", good[:len(good)/3], "unexpected"},
		{"empty", http.MethodPost, admission.PodPath, "application/json", nil, "request body is empty"},
		{"GET", http.MethodGet, admission.JobPath, "application/json", nil, "request body is empty"},
		{"wrong content type", http.MethodPost, admission.JobPath, "application/yaml", good, "expected application/json"},
		{"VcJob to the pod path", http.MethodPost, admission.PodPath, "application/json", good, "admits only v1/pods"},
		{"object of another kind", http.MethodPost, admission.JobPath, "application/json",
			review(jobGVR, jobGVK, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{}}`)), `request.object is apiVersion "v1" kind "Pod"`},
		{"object that does not decode", http.MethodPost, admission.JobPath, "application/json",
			review(jobGVR, jobGVK, []byte(`{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"labels":[]}}`)), "metadata.labels is an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, tc.method, tc.path, tc.contentType, tc.body)
			if r.Allowed || len(r.Patch) != 0 || r.Result == nil || r.Result.Code != http.StatusBadRequest {
				t.Fatalf("response %+v, want a 400 denial without patch", r)
			}
			if !strings.Contains(r.Result.Message, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", r.Result.Message, tc.wantMsg)
			}
		})
	}

	t.Run("untrusted client CA", func(t *testing.T) {
		_, err := http.Post(base+admission.JobPath, "application/json", bytes.NewReader(good)) //nolint:noctx
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("plain client error %v, want an unknown-authority TLS error", err)
		}
	})
}

// Serving certificates rotate, first under the same CA and then to a new CA (trusting both
// during the switch, as config/README.md describes), while creates stream through the API
// server. With failurePolicy Fail on both webhooks any failed call would fail a create: there must
// be none, and every created object must carry its finalizer.
func TestWebhookCertRotation(t *testing.T) {
	env := testbed.Cluster(t)
	ns := env.Namespace(t)
	s := stack.ServeWebhook(t, env)
	reg := s.Register(t, env, []string{ns}, func(w *admissionregistrationv1.MutatingWebhook) {
		w.FailurePolicy = utilptr.To(admissionregistrationv1.Fail)
	})
	c := stack.Unthrottled(t, env, env.Config)

	var ok, failed atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				var err error
				if i%2 == 0 {
					job := testbed.Job(ns, fmt.Sprintf("rot-%d-%d", w, i)).Task("main", 1, []string{"main"}).Obj()
					if err = c.Create(ctx, job, client.DryRunAll); err == nil && !slices.Contains(job.Finalizers, tracking.JobFinalizer) {
						err = errors.New("VcJob admitted without the job finalizer")
					}
				} else {
					// As Volcano's job controller creates it (dry run: no VcJob needs to exist).
					pod := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rot-%d-%d", w, i), Namespace: ns, Labels: map[string]string{tracking.JobPodLabel: "rot"},
							OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job", Name: "rot",
								UID: "6f1c2b1e-0000-4000-8000-000000000001", Controller: utilptr.To(true)}}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
					}
					if err = c.Create(ctx, pod, client.DryRunAll); err == nil && !slices.Contains(pod.Finalizers, tracking.PodFinalizer) {
						err = errors.New("VcJob's pod admitted without the pod finalizer")
					}
				}
				cancel()
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	pause := func() { time.Sleep(time.Second) }

	pause()
	took := s.WaitServes(t, s.Rotate(t, s.CA))
	t.Logf("same CA: rotated certificate served after %v", took)
	pause()

	next, err := certgen.NewCA("jobvault-e2e-ca-2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	setBundle := func(pems ...[]byte) func(*admissionregistrationv1.MutatingWebhookConfiguration) {
		return func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig.CABundle = bytes.Join(pems, nil)
			}
		}
	}
	reg.Update(t, setBundle(s.CA.CertPEM, next.CertPEM))
	pause()
	took = s.WaitServes(t, s.Rotate(t, next))
	t.Logf("new CA: rotated certificate served after %v", took)
	pause()
	reg.Update(t, setBundle(next.CertPEM))
	s.CA = next
	pause()

	close(stop)
	wg.Wait()
	t.Logf("%d admissions succeeded, %d failed during rotation", ok.Load(), failed.Load())
	failures.Range(func(k, _ any) bool { t.Errorf("admission failed: %v", k); return true })
	if failed.Load() != 0 {
		t.Fatalf("%d admissions failed during certificate rotation, want 0", failed.Load())
	}
	if ok.Load() < 20 {
		t.Errorf("only %d admissions during rotation: the stream did not exercise it", ok.Load())
	}
}
