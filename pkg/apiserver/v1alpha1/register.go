package v1alpha1

import (
	"fmt"
	"net/url"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the archive.
const GroupName = "archive.jobvault.io"

// SchemeGroupVersion is the group and version of these types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource names.
const (
	// Resource is the archived jobs' resource.
	Resource = "archivedjobs"
	// LogSubresource is the subresource that streams a container run's archived log.
	LogSubresource = "log"
	// VerifySubresource is the subresource that verifies a job's archive on request.
	VerifySubresource = "verify"
)

// Field selectors of the archivedjobs list, besides metadata.name and metadata.namespace. Each
// takes one value with = (or ==); the created bounds take an RFC 3339 time. A job is found by its
// UID with a get (kubectl get archivedjob UID), not a selector.
const (
	FieldSubmitter     = "spec.submitter"
	FieldPhase         = "status.phase"
	FieldArchiveState  = "status.archiveState"
	FieldCreatedFrom   = "createdFrom"   // creation at or after
	FieldCreatedBefore = "createdBefore" // creation before
)

// FieldSelectors lists every field selector the list accepts.
var FieldSelectors = []string{"metadata.name", "metadata.namespace", FieldSubmitter, FieldPhase,
	FieldArchiveState, FieldCreatedFrom, FieldCreatedBefore}

// AddToScheme registers the types, the conversion of the log options from query parameters and
// the field selectors the list accepts.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ArchivedJob{}, &ArchivedJobList{}, &ArchivedJobLogOptions{}, &ArchivedJobVerification{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	if err := s.AddConversionFunc((*url.Values)(nil), (*ArchivedJobLogOptions)(nil), func(a, b any, _ conversion.Scope) error {
		return logOptionsFromQuery(*a.(*url.Values), b.(*ArchivedJobLogOptions))
	}); err != nil {
		return err
	}
	return s.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("ArchivedJob"), func(label, value string) (string, string, error) {
		for _, f := range FieldSelectors {
			if f == label {
				return label, value, nil
			}
		}
		return "", "", fmt.Errorf("field label %q not supported for archivedjobs (supported: %v)", label, FieldSelectors)
	})
}

// logOptionsFromQuery reads the log options from a request's query parameters.
func logOptionsFromQuery(q url.Values, o *ArchivedJobLogOptions) error {
	o.Pod, o.Container, o.Instance = q.Get("pod"), q.Get("container"), q.Get("instance")
	for name, into := range map[string]*bool{"previous": &o.Previous, "timestamps": &o.Timestamps} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q: not a boolean", name, v)
		}
		*into = b
	}
	for name, into := range map[string]**int64{"tailLines": &o.TailLines, "limitBytes": &o.LimitBytes} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s=%q: not an integer", name, v)
		}
		*into = &n
	}
	return nil
}
