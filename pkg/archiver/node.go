package archiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// nodeCheckTTL is how long whether a node is lost is remembered: captures ask every poll, and
// thousands of pods being deleted at once must not each ask the API server every second.
const nodeCheckTTL = 5 * time.Second

// nodeChecks remembers recent answers of nodeLost, by node.
type nodeChecks struct {
	mu   sync.Mutex
	seen map[string]nodeCheck
}

type nodeCheck struct {
	lost string
	at   time.Time
}

// nodeLost says why the pod's node is lost, or "" if it is not (or cannot be told): the Node is
// gone, or has not been Ready for NodeLostAfter. Its kubelet will neither report the containers'
// end nor serve their logs, and a pod being deleted holds up Volcano's recreation of a pod of the
// same name: such a pod is finished at once, and a log that cannot be read from a lost node is
// recorded with a gap without waiting for the deadline. Read from the API server, not a cache:
// it is asked rarely, and a cluster-wide node cache would cost memory on large clusters.
func (r *PodReconciler) nodeLost(ctx context.Context, pod *corev1.Pod) string {
	name := pod.Spec.NodeName
	if name == "" {
		return ""
	}
	now := r.Clock.Now()
	r.nodes.mu.Lock()
	c, ok := r.nodes.seen[name]
	r.nodes.mu.Unlock()
	if ok && now.Sub(c.at) < nodeCheckTTL {
		return c.lost
	}
	var node corev1.Node
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &node)
	switch {
	case apierrors.IsNotFound(err):
		c.lost = fmt.Sprintf("node %s was deleted", name)
	case err != nil:
		ctrl.LoggerFrom(ctx).Info("Could not tell whether a node is lost; the log deadline applies", "node", name, "error", err.Error())
		return "" // unknown: the deadline rules apply
	default:
		c.lost = ""
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue && now.Sub(cond.LastTransitionTime.Time) >= r.NodeLostAfter {
				c.lost = fmt.Sprintf("node %s not ready (%s) since %s", name, cond.Reason, cond.LastTransitionTime.UTC().Format(time.RFC3339))
			}
		}
	}
	c.at = now
	r.nodes.mu.Lock()
	if r.nodes.seen == nil {
		r.nodes.seen = map[string]nodeCheck{}
	}
	r.nodes.seen[name] = c
	r.nodes.mu.Unlock()
	return c.lost
}
