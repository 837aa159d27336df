package archiver

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func podCreated(name string, at time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(at)}}
}

// TestOldestFirst: on a priority queue, pods come out oldest first whatever order their events came
// in, those of the same second in the order they came; on a plain queue they are simply added.
func TestOldestFirst(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	oldestFirst.Create(ctx, event.CreateEvent{Object: podCreated("c-new", t0.Add(2*time.Second))}, q)
	oldestFirst.Update(ctx, event.UpdateEvent{ObjectOld: podCreated("a-old", t0), ObjectNew: podCreated("a-old", t0)}, q)
	oldestFirst.Generic(ctx, event.GenericEvent{Object: podCreated("b-mid-1", t0.Add(time.Second))}, q)
	oldestFirst.Delete(ctx, event.DeleteEvent{Object: podCreated("b-mid-2", t0.Add(time.Second+500*time.Millisecond))}, q)
	oldestFirst.Generic(ctx, event.GenericEvent{Object: nil}, q) // ignored

	var got []string
	for range 4 {
		req, _, _ := q.GetWithPriority()
		got = append(got, req.Name)
		q.Done(req)
	}
	want := []string{"a-old", "b-mid-1", "b-mid-2", "c-new"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("taken in the order %v, want %v", got, want)
		}
	}
	if n := q.Len(); n != 0 {
		t.Errorf("%d left in the queue, want 0", n)
	}

	plain := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer plain.ShutDown()
	oldestFirst.Create(ctx, event.CreateEvent{Object: podCreated("p", t0)}, plain)
	if req, _ := plain.Get(); req.Name != "p" {
		t.Errorf("plain queue gave %v, want p", req)
	}
}
