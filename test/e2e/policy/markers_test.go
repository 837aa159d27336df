package policy

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

const markers = "jobvault-archiver-markers"

func removeFinalizer(f string) func(client.Object) {
	return func(o client.Object) { controllerutil.RemoveFinalizer(o, f) }
}

// Only the archiver removes jobvault's finalizers: not the tenant who owns the job (by patch, by
// replacing the job with her manifest, or through pods/status), not an operator, not a cluster
// admin. Other finalizers stay anyone's, and anyone may add ours.
func TestOnlyArchiverRemovesFinalizers(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, pod := runningJob(t, tenant, ns, "held")
	if !hasFinalizer(job, tracking.JobFinalizer) || !hasFinalizer(pod, tracking.PodFinalizer) {
		t.Fatalf("job finalizers %v, pod finalizers %v: the webhook did not add ours", job.Finalizers, pod.Finalizers)
	}

	for _, c := range []struct {
		name string
		who  user
		obj  client.Object
		do   func(user, client.Object) error
		want string
	}{
		{"tenant patches the job", tenant, job, func(u user, o client.Object) error {
			return patchAs(t, u, o, removeFinalizer(tracking.JobFinalizer))
		}, "may remove jobvault.io/archive from VcJob " + ns + "/held, alice may not"},
		{"tenant replaces the job with her manifest", tenant, job, func(u user, o client.Object) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				j := get(t, o.(*batchv1alpha1.Job).DeepCopy())
				j.Finalizers = nil
				return as(t, u).Update(t.Context(), j)
			})
		}, "jobvault.io/archive"},
		{"tenant patches the pod", tenant, pod, func(u user, o client.Object) error {
			return patchAs(t, u, o, removeFinalizer(tracking.PodFinalizer))
		}, "may remove jobvault.io/logs from pod " + ns + "/" + pod.Name + ", alice may not"},
		{"tenant patches the pod's status", tenant, pod, func(u user, o client.Object) error {
			return statusPatchAs(t, u, o, removeFinalizer(tracking.PodFinalizer))
		}, "jobvault.io/logs"},
		{"operator patches the job", operator, job, func(u user, o client.Object) error {
			return patchAs(t, u, o, removeFinalizer(tracking.JobFinalizer))
		}, "olga may not"},
		{"cluster admin patches the pod", clusterAd, pod, func(u user, o client.Object) error {
			return patchAs(t, u, o, removeFinalizer(tracking.PodFinalizer))
		}, "set the jobvault.io/release annotation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := get(t, c.obj.DeepCopyObject().(client.Object))
			expectDenied(t, c.do(c.who, c.obj), markers, c.want)
			unchanged(t, env, before)
		})
	}

	t.Run("other finalizers are anyone's", func(t *testing.T) {
		const own = "example.com/keep"
		if err := patchAs(t, tenant, job, func(o client.Object) { controllerutil.AddFinalizer(o, own) }); err != nil {
			t.Fatal(err)
		}
		if err := patchAs(t, tenant, job, removeFinalizer(own)); err != nil {
			t.Errorf("tenant removes her own finalizer: %v", err)
		}
	})
	t.Run("archiver removes them, anyone adds them", func(t *testing.T) {
		if err := patchAs(t, archiver, pod, removeFinalizer(tracking.PodFinalizer)); err != nil {
			t.Fatalf("archiver releases the pod: %v", err)
		}
		if err := patchAs(t, archiver, job, removeFinalizer(tracking.JobFinalizer)); err != nil {
			t.Fatalf("archiver releases the job: %v", err)
		}
		if err := patchAs(t, tenant, pod, func(o client.Object) { controllerutil.AddFinalizer(o, tracking.PodFinalizer) }); err != nil {
			t.Errorf("tenant adds the pod finalizer back: %v", err)
		}
		if got := get(t, pod.DeepCopy()); !hasFinalizer(got, tracking.PodFinalizer) || hasFinalizer(get(t, job.DeepCopy()), tracking.JobFinalizer) {
			t.Errorf("pod finalizers %v, job finalizers %v; want the pod's back, the job's gone", got.Finalizers, get(t, job.DeepCopy()).Finalizers)
		}
	})
}

var archiveResults = map[string]string{
	tracking.ArchivedAtAnnotation:      "2025-06-01T08:00:00Z",
	tracking.ArchiveLocationAnnotation: "s3://audit/team-a/train/uid/",
	tracking.ArchivedAsAnnotation:      "released",
	tracking.ArchivedReasonAnnotation:  "released by operator: ticket-1",
}

func setLabel(k, v string) func(client.Object) {
	return func(o client.Object) {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[k] = v
		o.SetLabels(l)
	}
}

func setAnnotations(kv map[string]string) func(client.Object) {
	return func(o client.Object) {
		a := o.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		maps.Copy(a, kv)
		o.SetAnnotations(a)
	}
}

// The archive results (archived-*, archive-location) are the archiver's to write: nobody creates
// an object with them, only the archiver sets, changes or removes them.
func TestOnlyArchiverWritesArchiveResults(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)

	t.Run("nobody creates a job with them", func(t *testing.T) {
		for _, u := range []user{tenant, operator, clusterAd} {
			j := testbed.Job(ns, "pre-archived").Task("main", 1, []string{"main"}).Obj()
			j.Annotations = map[string]string{tracking.ArchivedAtAnnotation: archiveResults[tracking.ArchivedAtAnnotation]}
			expectDenied(t, as(t, u).Create(t.Context(), j), markers,
				"VcJob "+ns+"/pre-archived may not be created with jobvault.io/archived-at")
		}
	})
	t.Run("nobody creates a pod with them", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pre-archived",
			Annotations: map[string]string{tracking.ArchiveLocationAnnotation: "s3://elsewhere/"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
		expectDenied(t, as(t, clusterAd).Create(t.Context(), p), markers, "may not be created with jobvault.io/archive-location")
	})

	job, _ := runningJob(t, tenant, ns, "results")
	for _, u := range []user{tenant, operator, clusterAd} {
		t.Run(u.name+" sets them", func(t *testing.T) {
			before := get(t, job.DeepCopy())
			// The keys come in no particular order.
			expectDenied(t, patchAs(t, u, job, setAnnotations(archiveResults)), markers, "may set, change or remove",
				"jobvault.io/archive-location", "jobvault.io/archived-as", "jobvault.io/archived-at", "jobvault.io/archived-reason",
				"on VcJob "+ns+"/results, "+u.name+" may not")
			unchanged(t, env, before)
		})
	}
	if err := patchAs(t, archiver, job, setAnnotations(archiveResults)); err != nil {
		t.Fatalf("archiver sets the results: %v", err)
	}
	for name, change := range map[string]func(client.Object){
		"changes archived-as": setAnnotations(map[string]string{tracking.ArchivedAsAnnotation: "archived"}),
		"removes archive-location": func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, tracking.ArchiveLocationAnnotation)
			o.SetAnnotations(a)
		},
	} {
		t.Run("tenant "+name, func(t *testing.T) {
			before := get(t, job.DeepCopy())
			expectDenied(t, patchAs(t, tenant, job, change), markers, "alice may not")
			unchanged(t, env, before)
		})
		t.Run("archiver "+name, func(t *testing.T) {
			if err := patchAs(t, archiver, job, change); err != nil {
				t.Errorf("archiver %s: %v", name, err)
			}
		})
	}
	t.Run("other annotations are anyone's", func(t *testing.T) {
		if err := patchAs(t, tenant, job, setAnnotations(map[string]string{"team-a.example.com/ticket": "42"})); err != nil {
			t.Errorf("tenant annotates her job: %v", err)
		}
	})
}

// Nobody but the archiver removes or changes a jobvault.io/ label: jobvault.io/tracked on a job, and
// on a pod, where anyone may add it.
func TestOnlyArchiverRemovesTrackedLabel(t *testing.T) {
	t.Parallel()
	env := policies(t)
	ns := webhookNamespace(t, env)
	job, pod := runningJob(t, tenant, ns, "tracked")
	if !tracking.IsTracked(job.Labels) {
		t.Fatalf("job labels %v: the webhook did not add ours", job.Labels)
	}
	unlabel := func(o client.Object) {
		l := o.GetLabels()
		delete(l, tracking.TrackedLabel)
		o.SetLabels(l)
	}
	relabel := func(v string) func(client.Object) { return setLabel(tracking.TrackedLabel, v) }
	if err := patchAs(t, tenant, pod, relabel(tracking.TrackedValue)); err != nil {
		t.Fatalf("tenant labels her pod: %v", err)
	}
	for _, c := range []struct {
		name   string
		who    user
		obj    client.Object
		status bool
		change func(client.Object)
		want   string
	}{
		{"tenant unlabels the job", tenant, job, false, unlabel, "may remove or change the label(s) jobvault.io/tracked of VcJob " + ns + "/tracked, alice may not"},
		{"tenant sets the job's label to false", tenant, job, false, relabel("false"), "jobvault.io/tracked"},
		{"operator unlabels the job", operator, job, false, unlabel, "olga may not"},
		{"tenant unlabels the pod", tenant, pod, false, unlabel, "of pod " + ns + "/" + pod.Name + ", alice may not"},
		{"cluster admin unlabels the pod's status", clusterAd, pod, true, unlabel, "rita may not"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := get(t, c.obj.DeepCopyObject().(client.Object))
			var err error
			if c.status {
				err = statusPatchAs(t, c.who, c.obj, c.change)
			} else {
				err = patchAs(t, c.who, c.obj, c.change)
			}
			expectDenied(t, err, markers, c.want)
			unchanged(t, env, before)
		})
	}
	t.Run("archiver unlabels", func(t *testing.T) {
		for _, o := range []client.Object{job, pod} {
			if err := patchAs(t, archiver, o, unlabel); err != nil {
				t.Errorf("archiver unlabels %s: %v", o.GetName(), err)
			}
		}
	})
}
