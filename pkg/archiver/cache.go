package archiver

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// CacheOptions keep only what the archiver reads in memory: the pods Volcano created for VcJobs
// (tracking.JobPodSelector; the reconcilers check tracking.JobOf), each cut down by podTransform,
// and VcJobs cut down by jobTransform. With o.Namespaces, only those are watched.
func CacheOptions(o Options) (cache.Options, error) {
	jobPods, err := metav1.LabelSelectorAsSelector(tracking.JobPodSelector())
	if err != nil {
		return cache.Options{}, err
	}
	var byNS map[string]cache.Config
	for _, ns := range o.Namespaces {
		if byNS == nil {
			byNS = map[string]cache.Config{}
		}
		byNS[ns] = cache.Config{}
	}
	return cache.Options{
		DefaultNamespaces: byNS,
		// managedFields are most of an object's size and never read.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:        {Label: jobPods, Transform: o.podTransform},
			&batchv1alpha1.Job{}: {Transform: o.jobTransform},
		},
	}, nil
}

// podTransform cuts a cached pod down to what the pod and job reconcilers read (TestPodTransform
// lists it and checks every reader sees the same): its identity, labels, owners, finalizers,
// deletion, jobvault's annotations; the node name and container names of its spec; its phase, start
// time and container states. Image, env, volumes, probes, resources, conditions, termination
// messages and the rest are dropped: they are most of a pod's size. A pod of another shard's job or
// of an excluded namespace keeps only what routes it (see pod predicates): nothing reads the rest.
// Patches stay correct: a merge patch is the difference between two copies of the cached pod, and
// what is stripped is absent from both.
func (o Options) podTransform(in any) (any, error) {
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil // a tombstone: only its key is read
	}
	out := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: o.cachedMeta(pod.ObjectMeta)}
	if !o.ownsPod(pod) {
		return out, nil
	}
	out.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName, TerminationGracePeriodSeconds: pod.Spec.TerminationGracePeriodSeconds,
		InitContainers: namesOnly(pod.Spec.InitContainers), Containers: namesOnly(pod.Spec.Containers)}
	for _, c := range pod.Spec.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: c.Name}})
	}
	out.Status = corev1.PodStatus{Phase: pod.Status.Phase, StartTime: pod.Status.StartTime,
		InitContainerStatuses:      statesOnly(pod.Status.InitContainerStatuses),
		ContainerStatuses:          statesOnly(pod.Status.ContainerStatuses),
		EphemeralContainerStatuses: statesOnly(pod.Status.EphemeralContainerStatuses)}
	return out, nil
}

// ownsPod reports whether this archiver archives the pod: outside the excluded namespaces, and the
// pod's job (its controlling VcJob) is this shard's. A pod with the finalizer but no VcJob owner
// (orphaned) is decided in PodReconciler.Reconcile, from its record: it is kept whole.
func (o Options) ownsPod(pod *corev1.Pod) bool {
	if o.excluded(pod.Namespace) {
		return false
	}
	job, ok := tracking.JobOf(pod)
	return !ok || o.Shard.Owns(job.UID)
}

// cachedMeta is the metadata every cached object keeps: no managedFields, and of the annotations
// only jobvault's (the release annotation, the archive markers) are read.
func (o Options) cachedMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, GenerateName: m.GenerateName, Namespace: m.Namespace, UID: m.UID,
		ResourceVersion: m.ResourceVersion, Generation: m.Generation, CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp, DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
		Labels: m.Labels, OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers}
	for k, v := range m.Annotations {
		if strings.HasPrefix(k, tracking.Prefix) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

func namesOnly(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name}
	}
	return out
}

// statesOnly keeps of each container status its name, restart count and the states' times and exit
// codes; termination messages (up to 4 KiB each), images and IDs are dropped.
func statesOnly(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, s := range ss {
		out[i] = corev1.ContainerStatus{Name: s.Name, RestartCount: s.RestartCount, State: stateOnly(s.State), LastTerminationState: stateOnly(s.LastTerminationState)}
	}
	return out
}

func stateOnly(s corev1.ContainerState) corev1.ContainerState {
	var out corev1.ContainerState
	if w := s.Waiting; w != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason}
	}
	if r := s.Running; r != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
	}
	if t := s.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Signal: t.Signal, Reason: t.Reason, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
	}
	return out
}

// jobTransform cuts a cached VcJob down to what is recorded. The job reconciler records the spec
// and status whole (rows, job.json), so a job of this shard keeps them; with Redact it is cached
// as recorded (redacted env values, no kubectl last-applied configuration), which recordable
// leaves as it is: job.json is byte for byte what it was. A job of another shard or of an
// excluded namespace keeps only its identity: nothing reads the rest.
func (o Options) jobTransform(in any) (any, error) {
	job, ok := in.(*batchv1alpha1.Job)
	if !ok {
		return in, nil
	}
	if o.excluded(job.Namespace) || !o.Shard.Owns(job.UID) {
		return &batchv1alpha1.Job{TypeMeta: job.TypeMeta, ObjectMeta: o.cachedMeta(job.ObjectMeta)}, nil
	}
	job.ManagedFields = nil
	if o.Redact {
		redact(job)
	}
	return job, nil
}

var _ toolscache.TransformFunc = Options{}.podTransform
