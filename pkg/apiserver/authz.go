package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
)

// The live objects whose rights an archived job's mirror.
const (
	volcanoGroup = "batch.volcano.sh"
	volcanoJobs  = "jobs"
)

// ReadVerb is the verb that grants reads of the archive on their own, for readers without live
// rights (auditors, and the view role through config/apiserver's aggregated ClusterRole): read
// on archivedjobs allows get and list of the namespace's archived jobs, read on
// archivedjobs/log their logs.
const ReadVerb = "read"

// mirror authorizes a read of the archive as a read of the live objects it records: whoever may
// get or list the namespace's VcJobs may get or list its archived jobs, and whoever may read its
// pods' logs (get pods/log) may read their archived logs; ReadVerb on the archive's resources
// allows too. Every question goes to the delegate, the cluster's authorizer through
// SubjectAccessReviews, in the namespace of the request: a namespace's RoleBindings decide for
// its jobs, and once the namespace is gone only cluster-wide grants remain.
//
// The kube-apiserver authorizes every request before its aggregator proxies it, on the
// request's own attributes (get archivedjobs): config/apiserver's gate lets every authenticated
// user through to this server, so the request's own verbs decide nothing here.
type mirror struct {
	delegate authorizer.Authorizer
}

// Authorize decides a request on the archive's resources by the rights it mirrors, and any other
// (discovery, OpenAPI, health) by the delegate.
func (m mirror) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() || a.GetAPIGroup() != v1alpha1.GroupName {
		return m.delegate.Authorize(ctx, a)
	}
	rights, ok := mirroredRights(a)
	if !ok {
		return authorizer.DecisionDeny, fmt.Sprintf("the archive serves no %s of %s", a.GetVerb(), resourceName(a)), nil
	}
	var errs []error
	for _, r := range rights {
		decision, reason, err := m.delegate.Authorize(ctx, r)
		if decision == authorizer.DecisionAllow {
			return decision, reason, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	reason := fmt.Sprintf("%s of %s needs %s", a.GetVerb(), resourceName(a), describe(rights))
	if len(errs) > 0 {
		return authorizer.DecisionNoOpinion, reason, errs[0]
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

// mirroredRights are the reads that allow a request on the archive, any one of them: for get or
// list of archivedjobs, the same verb on jobs.batch.volcano.sh, or ReadVerb on archivedjobs; for
// get of archivedjobs/log or archivedjobs/verify, get of pods/log, or ReadVerb on
// archivedjobs/log (verify reads the logs: the right to read them is the right to verify).
// Anything else is not served.
func mirroredRights(a authorizer.Attributes) ([]authorizer.AttributesRecord, bool) {
	if a.GetResource() != v1alpha1.Resource {
		return nil, false
	}
	base := authorizer.AttributesRecord{User: a.GetUser(), Namespace: a.GetNamespace(), ResourceRequest: true}
	live, own := base, base
	own.Verb, own.APIGroup, own.APIVersion, own.Resource, own.Name = ReadVerb, v1alpha1.GroupName, "*", v1alpha1.Resource, a.GetName()
	switch {
	case a.GetSubresource() == "" && (a.GetVerb() == "get" || a.GetVerb() == "list"):
		live.Verb, live.APIGroup, live.APIVersion, live.Resource, live.Name = a.GetVerb(), volcanoGroup, "*", volcanoJobs, a.GetName()
	case (a.GetSubresource() == v1alpha1.LogSubresource || a.GetSubresource() == v1alpha1.VerifySubresource) && a.GetVerb() == "get":
		// The pod is an option of the request, not known here: the right to read the logs of
		// every pod of the namespace is asked. Verifying reads every log of the job: it needs
		// the same right.
		live.Verb, live.APIGroup, live.APIVersion, live.Resource, live.Subresource = "get", "", "v1", "pods", "log"
		own.Subresource = v1alpha1.LogSubresource
	default:
		return nil, false
	}
	return []authorizer.AttributesRecord{live, own}, true
}

func resourceName(a authorizer.Attributes) string {
	name := a.GetResource()
	if a.GetSubresource() != "" {
		name += "/" + a.GetSubresource()
	}
	if a.GetAPIGroup() != "" {
		name += "." + a.GetAPIGroup()
	}
	return name
}

// describe says which rights would have allowed, for the refusal's message.
func describe(rights []authorizer.AttributesRecord) string {
	var s string
	for i, r := range rights {
		if i > 0 {
			s += " or "
		}
		s += r.Verb + " on " + resourceName(r)
	}
	if ns := rights[0].Namespace; ns != "" {
		s += " in namespace " + ns
	} else {
		s += " cluster-wide"
	}
	return s
}
