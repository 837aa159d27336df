package testbed

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	busv1alpha1 "volcano.sh/apis/pkg/apis/bus/v1alpha1"
)

// JobBuilder builds VcJobs for tests. It leaves the scheduler, queue and minAvailable unset, as
// users do: Volcano's admission webhook, which the testbed runs, defaults them (to volcano,
// default and the sum of the tasks' replicas).
type JobBuilder struct{ job batchv1alpha1.Job }

// Job starts a VcJob ns/name.
func Job(ns, name string) *JobBuilder {
	return &JobBuilder{job: batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
}

// PodOption changes a task's pod template.
type PodOption func(*corev1.PodTemplateSpec)

// Task adds a task of replicas pods running the named containers (image "busybox", never pulled).
func (b *JobBuilder) Task(name string, replicas int32, containers []string, opts ...PodOption) *JobBuilder {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			// KWOK's pod-complete stage waits between delay and jitter-delay (by default 1 s and
			// 5 s); equal values make the pod's run time deterministic.
			"pod-complete.stage.kwok.x-k8s.io/delay":        "500ms",
			"pod-complete.stage.kwok.x-k8s.io/jitter-delay": "500ms",
		}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](DefaultGracePeriod)},
	}
	for _, c := range containers {
		tmpl.Spec.Containers = append(tmpl.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	for _, o := range opts {
		o(&tmpl)
	}
	b.job.Spec.Tasks = append(b.job.Spec.Tasks, batchv1alpha1.TaskSpec{Name: name, Replicas: replicas, Template: tmpl})
	return b
}

// MaxRetry sets how often Volcano restarts the job.
func (b *JobBuilder) MaxRetry(n int32) *JobBuilder { b.job.Spec.MaxRetry = n; return b }

// Policy adds a job-level lifecycle policy, e.g. PodFailed → RestartJob.
func (b *JobBuilder) Policy(event busv1alpha1.Event, action busv1alpha1.Action) *JobBuilder {
	b.job.Spec.Policies = append(b.job.Spec.Policies, batchv1alpha1.LifecyclePolicy{Event: event, Action: action})
	return b
}

// Labels adds labels to the job.
func (b *JobBuilder) Labels(kv map[string]string) *JobBuilder {
	if b.job.Labels == nil {
		b.job.Labels = map[string]string{}
	}
	for k, v := range kv {
		b.job.Labels[k] = v
	}
	return b
}

// Obj returns the job.
func (b *JobBuilder) Obj() *batchv1alpha1.Job { return b.job.DeepCopy() }

// PodName is the name Volcano gives the index-th pod of a task.
func PodName(job, task string, index int) string { return fmt.Sprintf("%s-%s-%d", job, task, index) }

// Fails makes KWOK end the task's pods as Failed with exit code 1 (its chaos stage).
func Fails() PodOption {
	return func(p *corev1.PodTemplateSpec) {
		setLabel(p, "pod-container-running-failed.stage.kwok.x-k8s.io", "true")
		p.Annotations["pod-container-running-failed.stage.kwok.x-k8s.io/delay"] = "500ms"
		p.Annotations["pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay"] = "500ms"
	}
}

// RestartsOnce makes the node restart every container once (the runtime behind SetPodLogs or
// Runtime, a second into the first run), then KWOK complete the pod, so previous logs exist. The
// pods must have their output set with SetPodLogs or Runtime.Run.
func RestartsOnce() PodOption {
	return func(p *corev1.PodTemplateSpec) { setLabel(p, RestartOnceLabel, "true") }
}

// Restarts makes the node restart every container n times, each run lasting runFor, then KWOK
// complete the pod: a crash loop. As RestartsOnce, the pods need their output set.
func Restarts(n int, runFor time.Duration) PodOption {
	return func(p *corev1.PodTemplateSpec) {
		setLabel(p, RestartOnceLabel, "true")
		p.Annotations[restartsAnnotation] = strconv.Itoa(n)
		p.Annotations[restartAfterAnnotation] = runFor.String()
	}
}

// BackOff makes each restart the runtime does (Restarts) back off for d first, as a kubelet does
// in CrashLoopBackOff: the run died, the status shows the container Waiting with that run as its
// last state (pods/log serves it as previous and as current), and the next run starts d later.
func BackOff(d time.Duration) PodOption {
	return func(p *corev1.PodTemplateSpec) { p.Annotations[backOffAnnotation] = d.String() }
}

// DefaultGracePeriod is the terminationGracePeriodSeconds of the pods Job builds: shorter than the
// kubelet's 30 s so that tests deleting pods stay quick; GracePeriod sets another.
const DefaultGracePeriod = 5

// GracePeriod sets the task's pods' terminationGracePeriodSeconds.
func GracePeriod(seconds int64) PodOption {
	return func(p *corev1.PodTemplateSpec) { p.Spec.TerminationGracePeriodSeconds = &seconds }
}

// RunsFor keeps the task's pods Running for d (a Go duration string) before they complete.
func RunsFor(d string) PodOption {
	return func(p *corev1.PodTemplateSpec) {
		p.Annotations["pod-complete.stage.kwok.x-k8s.io/delay"] = d
		p.Annotations["pod-complete.stage.kwok.x-k8s.io/jitter-delay"] = d
	}
}

// InitContainers adds init containers to the task's pods.
func InitContainers(names ...string) PodOption {
	return func(p *corev1.PodTemplateSpec) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n, Image: "busybox"})
		}
	}
}

func setLabel(p *corev1.PodTemplateSpec, k, v string) {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
}

// OnNode binds the task's pods to node, bypassing the scheduler (for a node of the test's own,
// AddNode).
func OnNode(node string) PodOption {
	return func(p *corev1.PodTemplateSpec) { p.Spec.NodeName = node }
}
