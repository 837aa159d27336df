package archiver

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
)

// TestNotJobOf: a pod's claimed job counts only as a VcJob of the pod's namespace with exactly
// that name and UID, from the cache or, when the cache has not seen it yet, the API server. A
// name that is not one path segment is refused without a lookup.
func TestNotJobOf(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	job := func(ns, name, uid string) *batchv1alpha1.Job {
		return &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job("a", "train", "u1"), job("b", "victim", "v1")).Build()
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job("a", "train", "u1"), job("a", "fresh", "u2"), job("b", "victim", "v1")).Build()
	d := Deps{Client: cache, APIReader: api}
	for _, tc := range []struct {
		name    string
		podNS   string
		claim   archive.JobRef
		belongs bool
	}{
		{"its job, cached", "a", archive.JobRef{Namespace: "a", Name: "train", UID: "u1"}, true},
		{"its job, not cached yet", "a", archive.JobRef{Namespace: "a", Name: "fresh", UID: "u2"}, true},
		{"another UID", "a", archive.JobRef{Namespace: "a", Name: "train", UID: "v1"}, false},
		{"no such job", "a", archive.JobRef{Namespace: "a", Name: "missing", UID: "u3"}, false},
		{"another namespace's job by its name", "a", archive.JobRef{Namespace: "a", Name: "victim", UID: "v1"}, false},
		{"a name that climbs out", "a", archive.JobRef{Namespace: "a", Name: "../b/victim", UID: "v1"}, false},
		{"a ref of another namespace", "a", archive.JobRef{Namespace: "b", Name: "victim", UID: "v1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := d.notJobOf(t.Context(), tc.podNS, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if (why == "") != tc.belongs {
				t.Errorf("notJobOf(%s, %+v) = %q; want belongs=%t", tc.podNS, tc.claim, why, tc.belongs)
			}
		})
	}
}

// countingReader counts the reads it passes to the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestNotJobOfAsksTheAPIOncePerForgedClaim: a pod's owner reference names an existing VcJob of its
// namespace with a wrong UID. The cache has the job under another UID, so the claim is confirmed
// with the API server, once: its answer holds (UIDs are never reused), and every later reconcile
// of the pod, which a tenant can cause at will by updating its pods, costs no API request. A
// claim the API server could not answer is asked again.
func TestNotJobOfAsksTheAPIOncePerForgedClaim(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	train := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "train", UID: "u1"}}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(train).Build()
	api := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(train).Build()}
	d := Deps{Client: cache, APIReader: api, owners: newOwnerMisses(2)}
	for i := range 100 {
		why, err := d.notJobOf(t.Context(), "a", archive.JobRef{Namespace: "a", Name: "train", UID: "forged"})
		if err != nil || why == "" {
			t.Fatalf("reconcile %d: notJobOf = %q, %v; want a refusal", i, why, err)
		}
	}
	if api.gets != 1 {
		t.Errorf("%d API requests for 100 reconciles of one forged claim, want 1", api.gets)
	}
	// Bounded: more forged claims than it holds push the oldest out, which is then asked again.
	for _, uid := range []string{"f2", "f3", "forged"} {
		if why, err := d.notJobOf(t.Context(), "a", archive.JobRef{Namespace: "a", Name: "train", UID: uid}); err != nil || why == "" {
			t.Fatalf("notJobOf(%s) = %q, %v; want a refusal", uid, why, err)
		}
	}
	if api.gets != 4 {
		t.Errorf("%d API requests, want 4 (the first claim pushed out by two others, then asked again)", api.gets)
	}
	if d.owners.len() > 2 {
		t.Errorf("%d claims held, want at most 2", d.owners.len())
	}
}
