package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/jobvault/jobvault/pkg/tracking"
)

var podTarget = target{
	name:     "Pod",
	resource: corev1.SchemeGroupVersion.WithResource("pods"),
	kind:     corev1.SchemeGroupVersion.WithKind("Pod"),
}

// PodMutator admits the CREATE of a tracked pod (one carrying tracking.TrackedLabel, which the
// webhook's objectSelector already requires) by adding tracking.PodFinalizer, so that its logs
// outlive Volcano deleting it. An untracked pod passes unchanged.
type PodMutator struct{}

var _ cradmission.Handler = (*PodMutator)(nil)

// NewPodMutator returns a PodMutator.
func NewPodMutator() *PodMutator { return &PodMutator{} }

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req cradmission.Request) cradmission.Response {
	return serve(ctx, podTarget, req, m.mutate)
}

func (m *PodMutator) mutate(_ context.Context, _ cradmission.Request, p *patch, pod node) error {
	// Read before writing anything: an untracked pod must come back byte for byte.
	meta, ok, err := lookupObject(pod, "metadata", "metadata")
	if err != nil || !ok {
		return err
	}
	labels, _, err := lookupStringMap(meta, "labels", "metadata.labels")
	if err != nil {
		return err
	}
	if v, _ := labels.m[tracking.TrackedLabel].(string); v != tracking.TrackedValue {
		// Reached only if the objectSelector is missing or changed; not ours to track.
		return nil
	}
	return p.addFinalizer(meta, tracking.PodFinalizer)
}
