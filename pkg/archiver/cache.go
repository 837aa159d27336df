package archiver

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/record/redact"
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
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}:        {Label: jobPods, Transform: o.podTransform},
		&batchv1alpha1.Job{}: {Transform: o.jobTransform},
	}
	return cache.Options{
		DefaultNamespaces: byNS,
		// managedFields are most of an object's size and never read.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject:         byObject,
		NewInformer:      pagedInformers(byObject),
	}, nil
}

// listPageSize is how many objects an informer's list asks for at a time (client-go's default).
const listPageSize = 500

// pagedInformers makes informers whose lists are read in pages of listPageSize, each page cut down
// by the type's transform as it arrives, so that only the cut-down objects accumulate. Left to
// client-go, the first list asks for resourceVersion 0, which the API server answers from its
// watch cache in one response whatever the limit: 100,000 pods decoded whole before any was cut
// down took the archiver's RSS to 2.6 GiB. The transform runs again as the informer stores each
// object; applied twice, it changes nothing more. Types without a transform list as before.
func pagedInformers(byObject map[client.Object]cache.ByObject) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	transforms := map[reflect.Type]toolscache.TransformFunc{}
	for obj, by := range byObject {
		if by.Transform != nil {
			transforms[reflect.TypeOf(obj)] = by.Transform
		}
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if transform := transforms[reflect.TypeOf(obj)]; transform != nil {
			inner := toolscache.ToListerWatcherWithContext(lw)
			lw = &toolscache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
					return listPages(ctx, inner, opts, transform)
				},
				WatchFuncWithContext: inner.WatchWithContext,
			}
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
}

// listPages lists everything opts selects in pages, transforming each page's objects as it
// arrives, and returns them as one list at the first page's resourceVersion (the snapshot every
// page of a paginated list is read from), for the informer to watch from.
func listPages(ctx context.Context, lw toolscache.ListerWatcherWithContext, opts metav1.ListOptions, transform toolscache.TransformFunc) (runtime.Object, error) {
	// The latest version, paginated: "0" (any version, client-go's first list) is answered whole
	// from the watch cache, ignoring the limit, and an exact older version expires with
	// compaction. A fresher list than asked for is always allowed: the informer watches on from
	// the version it gets.
	opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	opts.Limit, opts.Continue = listPageSize, ""
	out := &metav1.List{}
	for {
		page, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			return nil, err
		}
		m, err := meta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		if out.ResourceVersion == "" {
			out.ResourceVersion = m.GetResourceVersion()
		}
		if err := meta.EachListItem(page, func(o runtime.Object) error {
			cut, err := transform(o)
			if err != nil {
				return err
			}
			obj, ok := cut.(runtime.Object)
			if !ok {
				return fmt.Errorf("transform of a listed %T returned %T", o, cut)
			}
			out.Items = append(out.Items, runtime.RawExtension{Object: obj})
			return nil
		}); err != nil {
			return nil, err
		}
		if m.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = m.GetContinue()
	}
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
// pod's job (its controlling VcJob, as claimed: PodReconciler confirms it) is this shard's. A pod with the finalizer but no VcJob owner
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
// as recorded (every string outside the allow-list as its marker, see redact.Job), which recordable
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
		redact.Job(job)
	}
	return job, nil
}

// recordable is the job as jobvault records it (rows, job.json, the manifest): a copy without
// managed fields, with Redact every string outside the allow-list replaced by its marker (see
// redact.Job), and with the submitter annotations replaced by the unknown submitter where the webhook
// cannot be shown to have written them (see unprovedSubmitter).
func (o Options) recordable(job *batchv1alpha1.Job) *batchv1alpha1.Job {
	out := job.DeepCopy()
	out.ManagedFields = nil
	if o.Redact {
		redact.Job(out)
	}
	unprovedSubmitter(out)
	return out
}

var _ toolscache.TransformFunc = Options{}.podTransform
