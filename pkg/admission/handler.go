package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// target is the one resource a mutator accepts, and how it is named in logs and metrics.
type target struct {
	// name is the metrics label value and the log key of the object (UpperCamel kind).
	name     string
	resource schema.GroupVersionResource
	kind     schema.GroupVersionKind
}

// mutateFunc changes obj, the decoded request object, through p, which records each change as a
// JSON patch operation. Any error it returns means the object is not what the API server would
// send and is reported to the caller as a bad request.
type mutateFunc func(ctx context.Context, req cradmission.Request, p *patch, obj node) error

// serve runs one admission request through the checks shared by every mutator, then mutate, and
// answers with the patch it recorded. It never panics on bad input and never changes an object it
// could not fully understand.
func serve(ctx context.Context, t target, req cradmission.Request, mutate mutateFunc) cradmission.Response {
	start := time.Now()
	log := ctrl.LoggerFrom(ctx).WithValues(t.name, klog.KRef(req.Namespace, req.Name))
	resp, result := admit(ctx, log, t, req, mutate)
	observe(t.name, result, time.Since(start))
	return resp
}

func admit(ctx context.Context, log logr.Logger, t target, req cradmission.Request, mutate mutateFunc) (cradmission.Response, string) {
	if err := t.check(req); err != nil {
		log.Info("Denied admission request", "reason", err.Error())
		return denied(err), resultDenied
	}
	// The configuration sends only CREATE; anything else is not ours to change.
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return cradmission.Allowed(fmt.Sprintf("jobvault mutates only CREATE of %s, not %s %s", t.resource.Resource, req.Operation, subresource(req))), resultUnchanged
	}
	obj, err := decode(req.Object.Raw, t.kind)
	if err != nil {
		log.Info("Denied admission request", "reason", err.Error())
		return denied(err), resultDenied
	}
	var p patch
	if err := mutate(ctx, req, &p, root(obj)); err != nil {
		log.Info("Denied admission request", "reason", err.Error())
		return denied(err), resultDenied
	}
	if len(p.ops) == 0 {
		log.V(2).Info("Admitted unchanged")
		return cradmission.Allowed(""), resultUnchanged
	}
	log.V(1).Info("Admitted with patch", "operations", len(p.ops))
	return cradmission.Patched("", p.ops...), resultMutated
}

// check rejects a request for another resource or kind: only a misconfigured webhook or a direct
// caller sends one, and a loud 400 gets that fixed where a silent pass would leave objects
// untracked.
func (t target) check(req cradmission.Request) error {
	got := schema.GroupVersionResource(req.Resource)
	if got != t.resource {
		return fmt.Errorf("this webhook admits only %s, got resource %q", describeGVR(t.resource), describeGVR(got))
	}
	if gvk := schema.GroupVersionKind(req.Kind); gvk != t.kind {
		return fmt.Errorf("this webhook admits only kind %s, got kind %q", describeGVK(t.kind), describeGVK(gvk))
	}
	return nil
}

// decoded are the members of the request object the mutators read: only metadata is changed.
var decoded = []string{"apiVersion", "kind", "metadata"}

// decode parses the decoded members of the raw object as untyped JSON: only metadata is changed,
// so nothing else needs a type, and fields newer than our API types are never at risk. The rest
// (a VcJob's tasks and pod templates, most of its bytes) is only checked to be valid JSON, by
// objectMembers, without building or copying anything. A decoded member given twice is refused:
// which of the two the API server would have kept is not ours to guess.
func decode(raw []byte, want schema.GroupVersionKind) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("request.object is empty, want a %s", describeGVK(want))
	}
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, fmt.Errorf("request.object is null, want a %s", describeGVK(want))
	}
	obj := make(map[string]any, len(decoded))
	err := objectMembers(raw, func(name, value []byte) error {
		i := slices.Index(decoded, string(name))
		if i < 0 {
			return nil
		}
		key := decoded[i]
		if _, twice := obj[key]; twice {
			return fmt.Errorf("request.object has %q twice", key)
		}
		var v any
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("decode request.object.%s: %w", key, err)
		}
		obj[key] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode request.object as %s: %w", describeGVK(want), err)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if got := schema.FromAPIVersionAndKind(apiVersion, kind); got != want {
		return nil, fmt.Errorf("request.object is apiVersion %q kind %q, want %s", apiVersion, kind, describeGVK(want))
	}
	return obj, nil
}

// denied answers a bad request: not allowed, code 400, the reason in the message.
func denied(err error) cradmission.Response {
	return cradmission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusBadRequest,
			Reason:  metav1.StatusReasonBadRequest,
			Message: err.Error(),
		},
	}}
}

func describeGVR(r schema.GroupVersionResource) string {
	if r.Empty() {
		return "none"
	}
	if r.Group == "" {
		return r.Version + "/" + r.Resource
	}
	return r.Group + "/" + r.Version + "/" + r.Resource
}

func describeGVK(k schema.GroupVersionKind) string {
	if k.Empty() {
		return "none"
	}
	apiVersion, kind := k.ToAPIVersionAndKind()
	return apiVersion + " " + kind
}

func subresource(req cradmission.Request) string {
	if req.SubResource == "" {
		return req.Resource.Resource
	}
	return req.Resource.Resource + "/" + req.SubResource
}
