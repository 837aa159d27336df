package admission

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/jobvault/jobvault/pkg/tracking"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// objBuilder builds untyped VcJobs and pods for tests, fluently.
type objBuilder struct{ obj map[string]any }

func vcjob() *objBuilder {
	return &objBuilder{obj: map[string]any{
		"apiVersion": "batch.volcano.sh/v1alpha1",
		"kind":       "Job",
		"metadata":   map[string]any{"name": "train", "namespace": "ml"},
		"spec": map[string]any{
			"minAvailable":  1,
			"schedulerName": "volcano",
			"queue":         "default",
		},
	}}
}

func pod() *objBuilder {
	return &objBuilder{obj: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": "train-worker-0", "namespace": "ml"},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": "busybox"}},
		},
	}}
}

func (b *objBuilder) meta() map[string]any { return b.obj["metadata"].(map[string]any) }

func (b *objBuilder) mapAt(parent map[string]any, key string) map[string]any {
	m, ok := parent[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		parent[key] = m
	}
	return m
}

// generateName drops the name, as a client using generateName sends it.
func (b *objBuilder) generateName(prefix string) *objBuilder {
	delete(b.meta(), "name")
	b.meta()["generateName"] = prefix
	return b
}

// vcjobPod is a pod as Volcano's job controller creates it: its job label and the VcJob as
// controller, and no label of ours (the job may have been admitted while our webhook was down).
func vcjobPod() *objBuilder {
	return pod().label(tracking.JobPodLabel, "train").owner("batch.volcano.sh/v1alpha1", "Job", true)
}

// owner appends an ownerReference to the object.
func (b *objBuilder) owner(apiVersion, kind string, controller bool) *objBuilder {
	refs, _ := b.meta()["ownerReferences"].([]any)
	b.meta()["ownerReferences"] = append(refs, map[string]any{
		"apiVersion": apiVersion, "kind": kind, "name": "train", "uid": "0b6c5c1e-1", "controller": controller, "blockOwnerDeletion": true,
	})
	return b
}

func (b *objBuilder) label(k, v string) *objBuilder {
	b.mapAt(b.meta(), "labels")[k] = v
	return b
}

func (b *objBuilder) annotation(k, v string) *objBuilder {
	b.mapAt(b.meta(), "annotations")[k] = v
	return b
}

func (b *objBuilder) finalizer(f string) *objBuilder {
	list, _ := b.meta()["finalizers"].([]any)
	b.meta()["finalizers"] = append(list, f)
	return b
}

// task appends a task; templateLabels nil means a template without metadata.
func (b *objBuilder) task(name string, templateLabels map[string]string) *objBuilder {
	template := map[string]any{
		"spec": map[string]any{
			"restartPolicy": "Never",
			"containers": []any{map[string]any{
				"name": "main", "image": "busybox",
				"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "1.5Gi"}},
			}},
		},
	}
	if templateLabels != nil {
		labels := map[string]any{}
		for k, v := range templateLabels {
			labels[k] = v
		}
		template["metadata"] = map[string]any{"labels": labels}
	}
	spec := b.mapAt(b.obj, "spec")
	tasks, _ := spec["tasks"].([]any)
	spec["tasks"] = append(tasks, map[string]any{"name": name, "replicas": 2, "template": template})
	return b
}

// set puts v at a dotted path of objects, creating them as needed.
func (b *objBuilder) set(v any, path ...string) *objBuilder {
	m := b.obj
	for _, k := range path[:len(path)-1] {
		m = b.mapAt(m, k)
	}
	m[path[len(path)-1]] = v
	return b
}

// build returns the object as encoding/json decodes it (numbers as float64).
func (b *objBuilder) build(t testing.TB) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(b.raw(t), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *objBuilder) raw(t testing.TB) []byte {
	t.Helper()
	raw, err := json.Marshal(b.obj)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// clone copies the builder so that cases can derive from a common base.
func (b *objBuilder) clone(t testing.TB) *objBuilder { return &objBuilder{obj: b.build(t)} }

func jobRequest(raw []byte, user string, groups ...string) cradmission.Request {
	return request(jobTarget, raw, user, groups...)
}

func podRequest(raw []byte) cradmission.Request {
	return request(podTarget, raw, "system:serviceaccount:volcano-system:volcano-controllers", "system:serviceaccounts")
}

func request(t target, raw []byte, user string, groups ...string) cradmission.Request {
	return cradmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "705ab4f5-6393-11e8-b7cc-42010a800002",
		Kind:      metav1.GroupVersionKind(t.kind),
		Resource:  metav1.GroupVersionResource(t.resource),
		Namespace: "ml",
		Operation: admissionv1.Create,
		UserInfo:  authenticationv1.UserInfo{Username: user, Groups: groups},
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// applyPatch applies the response's patch to raw as the API server would and returns the result.
func applyPatch(t testing.TB, raw []byte, resp cradmission.Response) []byte {
	t.Helper()
	if len(resp.Patches) == 0 {
		return raw
	}
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatalf("decode patch %s: %v", ops, err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch %s: %v", ops, err)
	}
	return out
}

func decodeMap(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return m
}
