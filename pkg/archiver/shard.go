package archiver

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/shard"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// LeaderElectionID is the name of the lease the archiver's replicas elect their leader on: one
// lease per shard, so each shard has its own leader (and standby replicas).
func LeaderElectionID(s shard.Shard) string {
	if !s.Sharded() {
		return "jobvault-archiver"
	}
	return fmt.Sprintf("jobvault-archiver-shard-%d", s.Index)
}

// shardFilter lets through only the events of this shard's objects: a VcJob by its UID, a pod by
// its VcJob's (tracking.JobOf). A pod no VcJob controls passes: which shard lets it go depends on
// its record (see PodReconciler.ownsLoose). A pod is routed by the UID it claims; the shard that
// gets it confirms the claim (notJobOf) before anything is recorded, so a forged UID only picks
// which shard refuses it.
func (o Options) shardFilter() predicate.Predicate {
	return predicate.NewPredicateFuncs(o.mine)
}

// mine reports whether obj is this shard's, as shardFilter lets it through.
func (o Options) mine(obj client.Object) bool {
	switch obj := obj.(type) {
	case *batchv1alpha1.Job:
		return o.Shard.Owns(obj.UID)
	case *corev1.Pod:
		job, ok := tracking.JobOf(obj)
		return !ok || o.Shard.Owns(job.UID)
	}
	return true
}

// ownsLoose reports whether this shard handles a pod outside JobOf's view (its owner reference
// stripped by an orphaning delete, or its JobPodLabel removed): the shard of its controlling VcJob
// if it still has one, else of the job it was recorded under, else of its own UID, so that
// exactly one shard lets it go.
func (r *PodReconciler) ownsLoose(ctx context.Context, pod client.Object) (bool, error) {
	if !r.Shard.Sharded() {
		return true, nil
	}
	if job, ok := tracking.ControllingJob(pod); ok {
		return r.Shard.Owns(job.UID), nil
	}
	row, err := r.Records.Pod(ctx, string(pod.GetUID()))
	switch {
	case errors.Is(err, db.ErrNotFound):
		return r.Shard.Owns(pod.GetUID()), nil
	case err != nil:
		return false, fmt.Errorf("read record of pod %s: %w", klog.KObj(pod), err)
	}
	return r.Shard.Owns(types.UID(row.JobUID)), nil
}
