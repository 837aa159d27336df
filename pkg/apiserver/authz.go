package apiserver

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// The live objects whose rights an archived job's mirror.
const (
	volcanoGroup = "batch.volcano.sh"
	volcanoJobs  = "jobs"
)

// mirror authorizes a read of the archive as a read of the live objects it records: whoever may
// get or list the namespace's VcJobs may get or list its archived jobs, and whoever may read its
// pods' logs (get pods/log) may read their archived logs. A grant on the archive's own resources
// (archivedjobs, archivedjobs/log) allows too, for auditors without live rights. Both questions go
// to the delegate: the cluster's authorizer through SubjectAccessReviews, in the namespace of the
// request, so a namespace's RoleBindings decide for its jobs, and once the namespace is gone only
// cluster-wide grants remain.
type mirror struct {
	delegate authorizer.Authorizer
}

// Authorize asks the delegate about the request as it is, then, for a read of the archive it
// did not allow, about the live objects the request mirrors.
func (m mirror) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	decision, reason, err := m.delegate.Authorize(ctx, a)
	if decision == authorizer.DecisionAllow {
		return decision, reason, err
	}
	live, ok := liveAttributes(a)
	if !ok {
		return decision, reason, err
	}
	liveDecision, liveReason, liveErr := m.delegate.Authorize(ctx, live)
	if liveDecision == authorizer.DecisionAllow {
		return liveDecision, liveReason, liveErr
	}
	return decision, reason, err
}

// liveAttributes are the attributes of the live read a read of the archive mirrors: get or list
// of archivedjobs as the same verb on jobs.batch.volcano.sh; get of archivedjobs/log as get of
// pods/log. Anything else mirrors nothing.
func liveAttributes(a authorizer.Attributes) (authorizer.AttributesRecord, bool) {
	if !a.IsResourceRequest() || a.GetAPIGroup() != v1alpha1.GroupName || a.GetResource() != v1alpha1.Resource {
		return authorizer.AttributesRecord{}, false
	}
	live := authorizer.AttributesRecord{
		User:            a.GetUser(),
		Verb:            a.GetVerb(),
		Namespace:       a.GetNamespace(),
		ResourceRequest: true,
	}
	switch {
	case a.GetSubresource() == "" && (a.GetVerb() == "get" || a.GetVerb() == "list"):
		live.APIGroup, live.APIVersion, live.Resource, live.Name = volcanoGroup, "*", volcanoJobs, a.GetName()
	case a.GetSubresource() == v1alpha1.LogSubresource && a.GetVerb() == "get":
		// The pod is an option of the request, not known here: the right to read the logs of
		// every pod of the namespace is asked.
		live.APIGroup, live.APIVersion, live.Resource, live.Subresource = "", "v1", "pods", "log"
	default:
		return authorizer.AttributesRecord{}, false
	}
	return live, true
}
