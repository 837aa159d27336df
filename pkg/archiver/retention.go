package archiver

import (
	"context"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/tracking"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// parseRetention validates a tracking.RetentionAnnotation value.
func parseRetention(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %s", d)
	}
	return d, nil
}

// retainUntil is the retain-until date of the final objects (log objects, job.json,
// manifest.json) of a job or pod finalized at finalizedAt: finalizedAt + Retention, or zero (no
// lock, no retention) when Retention is zero. The store locks them until then when it has a lock
// mode (--store-lock-mode). Capture segments are never retained: they are deleted once composed.
func (o Options) retainUntil(finalizedAt time.Time) time.Time {
	return retainFor(o.Retention, finalizedAt)
}

func retainFor(d time.Duration, finalizedAt time.Time) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return finalizedAt.UTC().Add(d)
}

// retainUntilIn is retainUntil for a job or pod of namespace, whose tracking.RetentionAnnotation, when
// valid, replaces --retention. The namespace is read through c (the manager's cache: namespaces'
// metadata only); when it cannot be read, or its value is invalid, --retention applies, logged.
// The one place the date is derived: the job's recorded retain_until (which the pruner reads) and
// its objects' locks come from here.
func (o Options) retainUntilIn(ctx context.Context, c client.Reader, namespace string, finalizedAt time.Time) time.Time {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		log.FromContext(ctx).Error(err, "Cannot read the namespace's retention; --retention applies", "namespace", namespace)
		return o.retainUntil(finalizedAt)
	}
	v, ok := ns.Annotations[tracking.RetentionAnnotation]
	if !ok {
		return o.retainUntil(finalizedAt)
	}
	d, err := parseRetention(v)
	if err != nil {
		log.FromContext(ctx).Error(err, "Invalid namespace retention annotation; --retention applies", "namespace", namespace, "annotation", tracking.RetentionAnnotation, "value", v)
		return o.retainUntil(finalizedAt)
	}
	return retainFor(d, finalizedAt)
}
