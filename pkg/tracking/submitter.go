package tracking

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The chain of custody of a VcJob's CREATE, beyond SubmitterAnnotation's username: which
// credential made the request, from which pod (a controller's service account token says), and
// on behalf of which owner (a VcJob that Volcano's JobFlow, a CronJob or an operator creates
// carries its ownerReferences from the start). The webhook copies each from the admission
// request; config/policy/submitter.yaml holds them to the request at CREATE and makes them
// immutable after.
const (
	// SubmittedForAnnotation holds the VcJob's ownerReferences as they were at admission, one
	// line per owner: OwnerLine's "<apiVersion> <kind> <name> <uid>", with " controller" after
	// the controlling one. Absent when the job had no owner. The owners may change later; this
	// does not.
	SubmittedForAnnotation = Prefix + "submitted-for"

	// BackstoppedAtAnnotation is set by the archiver, when it adds the job finalizer to a VcJob
	// that the webhook did not admit (see the archiver's backstop), to the time it did (RFC 3339,
	// UTC). Such a job's submitter annotations, if any, were written by whoever created it: they
	// are never recorded, UnknownSubmitter is.
	BackstoppedAtAnnotation = Prefix + "backstopped-at"

	// UnknownSubmitter is recorded as the submitter of a VcJob whose submitter annotations
	// cannot be shown to be the webhook's: backstopped, or with an admission time that is not the
	// API server's creation time (see AdmissionSkew).
	UnknownSubmitter = "unknown (not admitted by the webhook)"

	// AdmissionSkew bounds how far a VcJob's AdmittedAtAnnotation may be from its
	// creationTimestamp for the archiver to take its submitter annotations as the webhook's. The
	// webhook stamps the time at admission, a moment before the API server sets the creation
	// time; the bound allows for the clocks of the two hosts and a slow request.
	AdmissionSkew = 2 * time.Minute
)

// SubmitterExtra names a userInfo extra (set by the API server's authenticators) and the
// annotation the webhook copies it to.
type SubmitterExtra struct {
	Extra, Annotation string
}

// SubmitterExtras are the userInfo extras copied to a VcJob at admission, each as its values
// joined by ",": the credential that authenticated the request (a service account token's ID,
// a client certificate's fingerprint) and, for a token bound to a pod, that pod. They tell which
// controller instance created the job, where the username only names its service account.
var SubmitterExtras = []SubmitterExtra{
	{Extra: "authentication.kubernetes.io/credential-id", Annotation: Prefix + "submitter-credential-id"},
	{Extra: "authentication.kubernetes.io/pod-name", Annotation: Prefix + "submitter-pod-name"},
	{Extra: "authentication.kubernetes.io/pod-uid", Annotation: Prefix + "submitter-pod-uid"},
}

// OwnerLine is one owner's line in SubmittedForAnnotation.
func OwnerLine(ref metav1.OwnerReference) string {
	line := ref.APIVersion + " " + ref.Kind + " " + ref.Name + " " + string(ref.UID)
	if ref.Controller != nil && *ref.Controller {
		line += " controller"
	}
	return line
}

// SubmittedFor is the value of SubmittedForAnnotation for owners ("" for none).
func SubmittedFor(owners []metav1.OwnerReference) string {
	lines := make([]string, len(owners))
	for i, o := range owners {
		lines[i] = OwnerLine(o)
	}
	return strings.Join(lines, "\n")
}

// SubmitterAnnotations are the annotations that record who submitted a VcJob: written by the
// webhook at CREATE only, recorded only when the archiver can tell they are the webhook's.
func SubmitterAnnotations() []string {
	keys := []string{SubmitterAnnotation, SubmitterGroupsAnnotation, AdmittedAtAnnotation, SubmittedForAnnotation}
	for _, e := range SubmitterExtras {
		keys = append(keys, e.Annotation)
	}
	return keys
}
