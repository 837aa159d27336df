// Package retention is how long jobvault keeps what it archived, and the Pruner that deletes it
// after: the retain-until date of a job's or pod's final objects (--retention, or its namespace's
// jobvault.io/retention), which the store's lock enforces and the database records, and the
// deletion of the jobs past it that no legal hold holds.
package retention

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

// parse validates a tracking.RetentionAnnotation value.
func parse(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %s", d)
	}
	return d, nil
}

// Until is the retain-until date of the final objects (log objects, job.json, manifest.json) of a
// job or pod finalized at finalizedAt and retained for d: finalizedAt + d, or zero (no lock, no
// retention) when d is zero. The store locks them until then when it has a lock mode
// (--store-lock-mode). Capture segments are never retained: they are deleted once composed.
func Until(d time.Duration, finalizedAt time.Time) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return finalizedAt.UTC().Add(d)
}

// UntilIn is Until for a job or pod of namespace, whose tracking.RetentionAnnotation, when valid,
// replaces d (--retention). The namespace is read through c (the archiver's cache: namespaces'
// metadata only); when it cannot be read, or its value is invalid, d applies, logged. The one
// place the date is derived: the job's recorded retain_until (which the Pruner reads) and its
// objects' locks come from here.
func UntilIn(ctx context.Context, c client.Reader, namespace string, d time.Duration, finalizedAt time.Time) time.Time {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		log.FromContext(ctx).Error(err, "Cannot read the namespace's retention; --retention applies", "namespace", namespace)
		return Until(d, finalizedAt)
	}
	v, ok := ns.Annotations[tracking.RetentionAnnotation]
	if !ok {
		return Until(d, finalizedAt)
	}
	nsd, err := parse(v)
	if err != nil {
		log.FromContext(ctx).Error(err, "Invalid namespace retention annotation; --retention applies", "namespace", namespace, "annotation", tracking.RetentionAnnotation, "value", v)
		return Until(d, finalizedAt)
	}
	return Until(nsd, finalizedAt)
}
