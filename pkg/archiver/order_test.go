package archiver

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func podOf(name, job string, created time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(created)}}
	if job != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: job, UID: types.UID(job + "-uid"), Controller: ptr.To(true)}}
	}
	return p
}

// TestOldestFirst: pods sort by creation second, then a job's together, then by name.
func TestOldestFirst(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	pods := []*corev1.Pod{
		podOf("a-new-0", "a", t0.Add(2*time.Second)),
		podOf("z-same-second-1", "z", t0.Add(time.Second)),
		podOf("b-same-second-0", "b", t0.Add(time.Second)),
		podOf("z-same-second-0", "z", t0.Add(time.Second)),
		podOf("orphan", "", t0.Add(time.Second)),
		podOf("b-same-second-1", "b", t0.Add(time.Second)),
		podOf("c-old-0", "c", t0),
	}
	slices.SortFunc(pods, oldestFirst)
	var got []string
	for _, p := range pods {
		got = append(got, p.Name)
	}
	want := []string{"c-old-0", "orphan", "b-same-second-0", "b-same-second-1", "z-same-second-0", "z-same-second-1", "a-new-0"}
	if !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}
}

// TestPodEventsLeaveTheInitialList: a pod's creates in the cache's initial list are left to
// enqueueCached; every other event enqueues the pod.
func TestPodEventsLeaveTheInitialList(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, p := context.Background(), podOf("p", "j", time.Now())
	podEvents.Create(ctx, event.CreateEvent{Object: p, IsInInitialList: true}, q)
	if n := q.Len(); n != 0 {
		t.Fatalf("an initial list's create enqueued %d, want 0", n)
	}
	for name, send := range map[string]func(){
		"create": func() { podEvents.Create(ctx, event.CreateEvent{Object: p}, q) },
		"update": func() { podEvents.Update(ctx, event.UpdateEvent{ObjectOld: p, ObjectNew: p}, q) },
		"delete": func() { podEvents.Delete(ctx, event.DeleteEvent{Object: p}, q) },
	} {
		send()
		req, _ := q.Get()
		if req.Name != "p" || req.Namespace != "ns" {
			t.Errorf("%s enqueued %v, want ns/p", name, req)
		}
		q.Done(req)
	}
}
