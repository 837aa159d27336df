package archiver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// sweepPage is how many pods one list request of the sweep returns.
const sweepPage = 500

// sweep is the untracked-pod sweep: the periodic task (a periodic.Runnable, on the leader,
// every UntrackedPodSweepPeriod) of sweepOnce.
func (r *PodReconciler) sweep(ctx context.Context) error {
	n, err := r.sweepOnce(ctx)
	if n > 0 {
		ctrl.LoggerFrom(ctx).Info("Let go of pods that held the pod finalizer outside the archiver's view", "pods", n)
	}
	if err != nil {
		return fmt.Errorf("sweep for untracked pods: %w", err)
	}
	return nil
}

// sweepOnce finds the pods that hold the pod finalizer but are no longer in the archiver's pod
// cache, and lets them go. A pod leaves the cache when its Volcano job label is removed; no event
// about it then reaches the pod reconciler, and without this its finalizer would hold it forever.
// Every pod that carries the finalizer must reach a release. The list is uncached and
// metadata-only, page by page, so it costs little memory however many pods the cluster runs.
func (r *PodReconciler) sweepOnce(ctx context.Context) (int, error) {
	namespaces := r.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	let := 0
	for _, ns := range namespaces {
		var cont string
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
			if err := r.APIReader.List(ctx, list, client.InNamespace(ns), client.Limit(sweepPage), client.Continue(cont)); err != nil {
				return let, fmt.Errorf("list pods: %w", err)
			}
			for i := range list.Items {
				p := &list.Items[i]
				if !controllerutil.ContainsFinalizer(p, tracking.PodFinalizer) || r.excluded(p.Namespace) {
					continue
				}
				if _, cached := p.Labels[tracking.JobPodLabel]; cached {
					continue // the pod reconciler sees it
				}
				if mine, err := r.ownsLoose(ctx, p); err != nil || !mine {
					if err != nil {
						return let, err
					}
					continue // another shard's
				}
				p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
				if err := r.letGoUntracked(ctx, p); err != nil {
					return let, err
				}
				let++
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
	}
	return let, nil
}

// letGoUntracked lets go of a pod that left the archiver's view, recording it released. A pod a
// VcJob of its namespace controls is recorded under that job even if it never was (its label was
// removed before the archiver saw it), so that the job's record says it is incomplete.
func (r *PodReconciler) letGoUntracked(ctx context.Context, p *metav1.PartialObjectMetadata) error {
	why := fmt.Sprintf("its %s label was removed, which takes it out of the archiver's view", tracking.JobPodLabel)
	if err := r.releaseOutOfView(ctx, p, why); err != nil {
		return err
	}
	return r.letGo(ctx, p, why)
}

// releaseOutOfView records a pod outside the archiver's view released for why: under its
// controlling VcJob if that job is confirmed (notJobOf), else only if it has a row already.
func (d Deps) releaseOutOfView(ctx context.Context, p client.Object, why string) error {
	reason := "released without archiving: " + why
	ref, ok := tracking.ControllingJob(p)
	if !ok {
		return d.markReleased(ctx, p, reason)
	}
	job := archive.JobRef{Namespace: p.GetNamespace(), Name: ref.Name, UID: string(ref.UID)}
	if not, err := d.notJobOf(ctx, p.GetNamespace(), job); err != nil || not != "" {
		if err != nil {
			return err
		}
		return d.markReleased(ctx, p, reason)
	}
	return d.recordReleased(ctx, p, job, why)
}

// podsOutOfView finds, from the API server, the pods job controls that the archiver's pod cache
// does not hold (their volcano.sh/job-name label removed), records each released under the job
// (so the job's seal counts it and the job is released, not archived) and lets go of those that
// hold the pod finalizer. The list selects only pods without the label, metadata only, page by
// page: the namespace's other pods are not sent. It returns how many it found.
func (d Deps) podsOutOfView(ctx context.Context, job *batchv1alpha1.Job) (int, error) {
	unlabelled, err := labels.Parse("!" + tracking.JobPodLabel)
	if err != nil {
		return 0, err
	}
	found, cont := 0, ""
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := d.APIReader.List(ctx, list, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: unlabelled},
			client.Limit(sweepPage), client.Continue(cont)); err != nil {
			return found, fmt.Errorf("list pods of job %s outside the cache: %w", klog.KObj(job), err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if ref, ok := tracking.ControllingJob(p); !ok || ref.UID != job.UID || ref.Name != job.Name {
				continue
			}
			found++
			p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			why := fmt.Sprintf("its %s label was removed, which took it out of the archiver's view before its logs were archived", tracking.JobPodLabel)
			if err := d.recordReleased(ctx, p, archive.JobRef{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID)}, why); err != nil {
				return found, err
			}
			if controllerutil.ContainsFinalizer(p, tracking.PodFinalizer) {
				if err := d.letGo(ctx, p, why); err != nil {
					return found, err
				}
			}
		}
		if cont = list.Continue; cont == "" {
			return found, nil
		}
	}
}
