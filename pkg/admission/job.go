package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
// tracking.JobFinalizer, tracking.TrackedLabel on the job and on every task's pod template, and
// the submitter annotations from the request's userInfo with the admission time. Nothing outside
// metadata and the templates' metadata changes; the name and UID, empty at admission for
// generateName jobs, are never used.
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

	return labelTemplates(p, job)
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

// labelTemplates puts the tracking label on spec.tasks[*].template.metadata.labels so that every
// pod Volcano creates from the job carries it. A job without spec or tasks is left for Volcano's
// validation to reject.
func labelTemplates(p *patch, job node) error {
	specValue, ok := job.m["spec"]
	if !ok || specValue == nil {
		return nil
	}
	spec, ok := specValue.(map[string]any)
	if !ok {
		return fmt.Errorf("spec is %s, want an object", jsonType(specValue))
	}
	tasksValue, ok := spec["tasks"]
	if !ok || tasksValue == nil {
		return nil
	}
	tasks, ok := tasksValue.([]any)
	if !ok {
		return fmt.Errorf("spec.tasks is %s, want an array", jsonType(tasksValue))
	}
	for i, taskValue := range tasks {
		task, ok := taskValue.(map[string]any)
		if !ok {
			return fmt.Errorf("spec.tasks[%d] is %s, want an object", i, jsonType(taskValue))
		}
		path := fmt.Sprintf("spec.tasks[%d].template", i)
		template, err := p.object(node{m: task, ptr: fmt.Sprintf("/spec/tasks/%d", i)}, "template", path)
		if err != nil {
			return err
		}
		meta, err := p.object(template, "metadata", path+".metadata")
		if err != nil {
			return err
		}
		labels, err := p.stringMap(meta, "labels", path+".metadata.labels")
		if err != nil {
			return err
		}
		p.setString(labels, tracking.TrackedLabel, tracking.TrackedValue)
	}
	return nil
}
