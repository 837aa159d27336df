package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// reinvocationWindow bounds how far an admitted-at annotation already on a new VcJob may be from
// now to be kept. The API server reinvokes us within the same request (each webhook call is capped
// at a few seconds), so our own earlier stamp is always well inside it; a value outside it was not
// written by us for this request and is replaced. A forged value inside it is at most this far off.
const reinvocationWindow = 2 * time.Minute

var jobTarget = target{
	name:     "VcJob",
	resource: batchv1alpha1.SchemeGroupVersion.WithResource("jobs"),
	kind:     batchv1alpha1.SchemeGroupVersion.WithKind("Job"),
}

// JobMutator admits the CREATE of a Volcano Job (batch.volcano.sh/v1alpha1): it adds
// tracking.JobFinalizer, tracking.TrackedLabel and the submitter annotations from the request's
// userInfo with the admission time, and the chain of custody (stampCustody). Nothing outside the job's metadata changes: its pods are
// recognised by their owner and Volcano's own label (tracking.JobOf), so the pod templates need
// no label of ours, which a job admitted while the webhook was down could never get (Volcano
// refuses spec changes). The name and UID, empty at admission for generateName jobs, are never
// used.
type JobMutator struct {
	clock clock.PassiveClock
}

var _ cradmission.Handler = (*JobMutator)(nil)

// NewJobMutator returns a JobMutator that stamps admission times from clk.
func NewJobMutator(clk clock.PassiveClock) (*JobMutator, error) {
	if clk == nil {
		return nil, errors.New("new VcJob mutator: clk is nil")
	}
	return &JobMutator{clock: clk}, nil
}

// Handle implements admission.Handler.
func (m *JobMutator) Handle(ctx context.Context, req cradmission.Request) cradmission.Response {
	return serve(ctx, jobTarget, req, m.mutate)
}

func (m *JobMutator) mutate(ctx context.Context, req cradmission.Request, p *patch, job node) error {
	user := req.UserInfo
	if user.Username == "" {
		return errors.New("request.userInfo.username is empty: the submitter of a VcJob must be known")
	}
	meta, err := p.object(job, "metadata", "metadata")
	if err != nil {
		return err
	}
	if gn, ok := meta.m["generateName"].(string); ok && gn != "" {
		ctrl.LoggerFrom(ctx).V(3).Info("Admitting VcJob with generateName", "generateName", gn)
	}
	if err := p.addFinalizer(meta, tracking.JobFinalizer); err != nil {
		return err
	}
	labels, err := p.stringMap(meta, "labels", "metadata.labels")
	if err != nil {
		return err
	}
	p.setString(labels, tracking.TrackedLabel, tracking.TrackedValue)

	annotations, err := p.stringMap(meta, "annotations", "metadata.annotations")
	if err != nil {
		return err
	}
	groups := user.Groups
	if groups == nil {
		groups = []string{}
	}
	groupsJSON, err := json.Marshal(groups)
	if err != nil {
		return fmt.Errorf("encode submitter groups: %w", err)
	}
	// Always from userInfo: on CREATE a value in the object is the user's claim, not a fact. A
	// reinvocation carries the same userInfo, so this is a no-op then.
	p.setString(annotations, tracking.SubmitterAnnotation, user.Username)
	p.setString(annotations, tracking.SubmitterGroupsAnnotation, string(groupsJSON))
	existing, _ := annotations.m[tracking.AdmittedAtAnnotation].(string)
	p.setString(annotations, tracking.AdmittedAtAnnotation, admittedAt(existing, m.clock.Now()))
	return stampCustody(p, meta, annotations, user)
}

// stampCustody records the rest of the chain of custody from the request: the credential and pod
// of userInfo's extra (tracking.SubmitterExtras) and the owners the job was created for
// (tracking.SubmittedForAnnotation). A value the request does not give is left out, and a claim
// of one in the manifest is emptied (set to "", as the patch only adds), so that whatever is
// there after admission is the request's.
func stampCustody(p *patch, meta, annotations node, user authenticationv1.UserInfo) error {
	for _, e := range tracking.SubmitterExtras {
		stampFact(p, annotations, e.Annotation, strings.Join(user.Extra[e.Extra], ","))
	}
	owners, err := ownerReferences(meta)
	if err != nil {
		return err
	}
	stampFact(p, annotations, tracking.SubmittedForAnnotation, tracking.SubmittedFor(owners))
	return nil
}

// stampFact sets key to value, or when value is "" empties a claim of it and adds nothing.
func stampFact(p *patch, annotations node, key, value string) {
	if _, claimed := annotations.m[key]; value != "" || claimed {
		p.setString(annotations, key, value)
	}
}

// admittedAt keeps an admitted-at stamp that our earlier pass of the same request could have
// written (canonical RFC 3339 UTC within reinvocationWindow of now) and replaces anything else.
func admittedAt(existing string, now time.Time) string {
	now = now.UTC()
	if t, err := time.Parse(time.RFC3339, existing); err == nil &&
		t.UTC().Format(time.RFC3339) == existing &&
		t.After(now.Add(-reinvocationWindow)) && t.Before(now.Add(reinvocationWindow)) {
		return existing
	}
	return now.Format(time.RFC3339)
}
