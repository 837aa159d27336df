package stack

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/jobvault/jobvault/test/testbed"
)

// Kustomize renders the module's config/<dir> (a slash-separated path) with `kubectl kustomize`
// and returns its objects, as DecodeObjects decodes them.
func Kustomize(t TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "kubectl", "kustomize", filepath.Join(testbed.ModuleRoot(), "config", filepath.FromSlash(dir)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v\n%s", dir, err, stderr.String())
	}
	return DecodeObjects(t, "config/"+dir, out)
}

// DecodeObjects decodes the objects of a YAML stream rendered from what (a kustomization, a
// chart), and fails if it holds none.
func DecodeObjects(t TB, what string, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode %s: %v", what, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s renders no objects", what)
	}
	return objs
}
