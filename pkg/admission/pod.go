package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/jobvault/jobvault/pkg/tracking"
)

var podTarget = target{
	name:     "Pod",
	resource: corev1.SchemeGroupVersion.WithResource("pods"),
	kind:     corev1.SchemeGroupVersion.WithKind("Pod"),
}

// PodMutator admits the CREATE of a VcJob's pod (tracking.JobOf: Volcano's job label, which the
// webhook's objectSelector already requires, and a VcJob as controlling owner) by adding
// tracking.PodFinalizer, so that its logs outlive Volcano deleting it. Any other pod passes
// unchanged.
type PodMutator struct{}

var _ cradmission.Handler = (*PodMutator)(nil)

// NewPodMutator returns a PodMutator.
func NewPodMutator() *PodMutator { return &PodMutator{} }

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req cradmission.Request) cradmission.Response {
	return serve(ctx, podTarget, req, m.mutate)
}

func (m *PodMutator) mutate(_ context.Context, _ cradmission.Request, p *patch, pod node) error {
	// Read before writing anything: any other pod must come back byte for byte.
	meta, ok, err := lookupObject(pod, "metadata", "metadata")
	if err != nil || !ok {
		return err
	}
	owner, err := ownerMeta(meta)
	if err != nil {
		return err
	}
	if _, ok := tracking.JobOf(owner); !ok {
		// Not a VcJob's pod: Volcano's label copied onto another pod, or a missing objectSelector.
		return nil
	}
	return p.addFinalizer(meta, tracking.PodFinalizer)
}

// ownerMeta decodes what tracking.JobOf reads of a pod's metadata: its labels and owner references.
func ownerMeta(meta node) (*metav1.ObjectMeta, error) {
	labels, _, err := lookupStringMap(meta, "labels", "metadata.labels")
	if err != nil {
		return nil, err
	}
	om := &metav1.ObjectMeta{Labels: make(map[string]string, len(labels.m))}
	for k, v := range labels.m {
		om.Labels[k] = v.(string) // checked by lookupStringMap
	}
	if om.OwnerReferences, err = ownerReferences(meta); err != nil {
		return nil, err
	}
	return om, nil
}
