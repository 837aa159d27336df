package apiserver

import (
	extensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// typePrefix is the Go package path of the API types, as OpenAPI definitions are keyed.
const typePrefix = "github.com/jobvault/jobvault/pkg/apiserver/v1alpha1."

// openAPIDefinitions are the schemas of the archive's types, written here rather than generated:
// kube-openapi's openapi-gen of the version this module uses does not build with this Go. The
// definitions of Kubernetes' own meta types (ObjectMeta, ListMeta, Time, Status, …) come from
// apiextensions-apiserver's generated ones. The schemas serve kubectl explain and the server-side
// apply type converter k8s.io/apiserver requires; the API is read-only.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := extensionsopenapi.GetOpenAPIDefinitions(ref)
	meta := func(name string) spec.Schema { return refTo(ref, "k8s.io/apimachinery/pkg/apis/meta/v1."+name) }
	own := func(name string) spec.Schema { return refTo(ref, typePrefix+name) }
	str, i32, i64, boolean := prim("string"), prim("integer", "int32"), prim("integer", "int64"), prim("boolean")
	strs := arrayOf(str)
	add := func(name, desc string, props map[string]spec.Schema, required []string, deps ...string) {
		s := spec.Schema{SchemaProps: spec.SchemaProps{Description: desc, Type: []string{"object"}, Properties: props, Required: required}}
		defs[typePrefix+name] = common.OpenAPIDefinition{Schema: s, Dependencies: deps}
	}
	typeMeta := map[string]spec.Schema{"apiVersion": str, "kind": str}
	with := func(m map[string]spec.Schema, more map[string]spec.Schema) map[string]spec.Schema {
		out := map[string]spec.Schema{}
		for k, v := range m {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	metaTime := "k8s.io/apimachinery/pkg/apis/meta/v1.Time"
	add("ArchivedJob", "ArchivedJob is the record of one VcJob as jobvault keeps it, whether the job still exists or not.",
		with(typeMeta, map[string]spec.Schema{"metadata": meta("ObjectMeta"), "spec": own("ArchivedJobSpec"), "status": own("ArchivedJobStatus")}),
		nil, "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta", typePrefix+"ArchivedJobSpec", typePrefix+"ArchivedJobStatus")
	add("ArchivedJobList", "ArchivedJobList is a page of archived jobs, oldest first.",
		with(typeMeta, map[string]spec.Schema{"metadata": meta("ListMeta"), "items": arrayOf(own("ArchivedJob"))}),
		[]string{"items"}, "k8s.io/apimachinery/pkg/apis/meta/v1.ListMeta", typePrefix+"ArchivedJob")
	add("ArchivedJobSpec", "ArchivedJobSpec is what the job was submitted as.",
		map[string]spec.Schema{"cluster": str, "queue": str, "submitter": str, "submitterGroups": strs, "admittedAt": meta("Time")},
		nil, metaTime)
	add("ArchivedJobStatus", "ArchivedJobStatus is how the job ran and how far its archive came.",
		map[string]spec.Schema{"phase": str, "retryCount": i32, "finishedAt": meta("Time"), "archiveState": str,
			"archiveLocation": str, "archivedAt": meta("Time"), "releaseReason": str,
			"transitions": arrayOf(own("PhaseTransition")), "pods": arrayOf(own("ArchivedPod"))},
		nil, metaTime, typePrefix+"PhaseTransition", typePrefix+"ArchivedPod")
	add("PhaseTransition", "PhaseTransition is one phase change of the job.",
		map[string]spec.Schema{"phase": str, "time": meta("Time"), "reason": str, "message": str},
		[]string{"phase", "time"}, metaTime)
	add("ArchivedPod", "ArchivedPod is one pod of the job.",
		map[string]spec.Schema{"name": str, "uid": str, "task": str, "node": str, "phase": str, "createdAt": meta("Time"),
			"startedAt": meta("Time"), "finishedAt": meta("Time"), "deletedBeforeTerminal": boolean, "archiveState": str,
			"releaseReason": str, "containers": arrayOf(own("ArchivedContainer"))},
		[]string{"name", "uid", "createdAt"}, metaTime, typePrefix+"ArchivedContainer")
	add("ArchivedContainer", "ArchivedContainer is one container of a pod with the log of each of its runs.",
		map[string]spec.Schema{"name": str, "type": str, "instances": arrayOf(own("LogInstance")), "gaps": arrayOf(own("LogGap"))},
		[]string{"name", "type"}, typePrefix+"LogInstance", typePrefix+"LogGap")
	add("LogInstance", "LogInstance is the archived log of one container run.",
		map[string]spec.Schema{"name": str, "state": str, "bytes": i64, "storedBytes": i64, "sha256": str, "reason": str},
		[]string{"name", "state", "bytes"})
	add("LogGap", "LogGap is output of a container run that could not be captured.",
		map[string]spec.Schema{"run": i32, "after": meta("Time"), "before": meta("Time"), "reason": str, "detail": str},
		[]string{"run", "reason"}, metaTime)
	add("ArchivedJobLogOptions", "ArchivedJobLogOptions are the query parameters of the log subresource.",
		with(typeMeta, map[string]spec.Schema{"pod": str, "container": str, "instance": str, "previous": boolean,
			"tailLines": i64, "limitBytes": i64, "timestamps": boolean}), nil)
	add("ArchivedJobVerification", "ArchivedJobVerification is a job's archive re-read and compared with the database, as archiver logs verify does.",
		with(typeMeta, map[string]spec.Schema{"metadata": meta("ObjectMeta"), "archiveState": str, "location": str, "logs": i32,
			"stored": i32, "unavailable": i32, "findings": arrayOf(own("VerificationFinding")), "unreferenced": strs,
			"gaps": arrayOf(own("VerificationGap"))}),
		[]string{"logs", "stored", "unavailable"}, "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta",
		typePrefix+"VerificationFinding", typePrefix+"VerificationGap")
	add("VerificationFinding", "VerificationFinding is one thing found wrong with the archive.",
		map[string]spec.Schema{"kind": str, "item": str, "key": str, "detail": str}, []string{"kind", "item", "detail"})
	add("VerificationGap", "VerificationGap is output of a container run the records say is missing.",
		map[string]spec.Schema{"podUID": str, "container": str, "run": i32, "after": meta("Time"), "before": meta("Time"),
			"reason": str, "detail": str},
		[]string{"podUID", "container", "run", "reason"}, metaTime)
	return defs
}

func prim(typ string, format ...string) spec.Schema {
	s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}}}
	if len(format) > 0 {
		s.Format = format[0]
	}
	return s
}

func arrayOf(items spec.Schema) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &items}}}
}

func refTo(ref common.ReferenceCallback, name string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name)}}
}
