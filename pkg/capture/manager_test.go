package capture

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManagerEndedFirst: with every slot taken, captures of ended containers get the freed slots
// before those of running containers, each kind in arrival order, and a waiting capture whose
// container ends meanwhile moves forward. The bound holds throughout, and every capture's pod is
// sent on Events when it ends.
func TestManagerEndedFirst(t *testing.T) {
	m := NewManager(2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-m.started

	var (
		mu            sync.Mutex
		order         []string
		running, peak int
		release       = map[string]chan struct{}{}
	)
	run := func(key string, ended bool) {
		t.Helper()
		ch := make(chan struct{})
		if release[key] == nil {
			release[key] = ch
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: key}}
		if !m.Ensure(key, pod, ended, func(context.Context) {
			mu.Lock()
			order = append(order, key)
			running++
			peak = max(peak, running)
			mu.Unlock()
			<-ch
			mu.Lock()
			running--
			mu.Unlock()
		}) {
			t.Fatalf("Ensure(%s) = false on a started manager", key)
		}
	}
	// started waits until n captures have started.
	started := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := len(order)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d captures started, want %d", got, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// end lets a running capture return, and waits for its pod on Events.
	end := func(key string) {
		t.Helper()
		close(release[key])
		select {
		case e := <-m.Events():
			if e.Object.GetName() != key {
				t.Fatalf("event for %s, want %s", e.Object.GetName(), key)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event after %s ended", key)
		}
	}

	run("live-1", false)
	started(1)
	run("live-2", false)
	started(2)
	run("live-3", false)                     // waits
	run("ended-1", true)                     // waits, but goes first
	run("live-4", false)                     // waits
	run("ended-2", true)                     // waits, after ended-1
	run("live-2", false)                     // already running: nothing new
	if !m.Ensure("live-4", nil, true, nil) { // live-4's container ended meanwhile: it moves forward
		t.Fatal("Ensure(live-4) = false")
	}
	for i, key := range []string{"live-1", "live-2", "ended-1", "ended-2"} {
		end(key)
		started(3 + i)
	}
	end("live-4")
	end("live-3")

	want := []string{"live-1", "live-2", "ended-1", "ended-2", "live-4", "live-3"}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != len(want) {
		t.Fatalf("captures ran in order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("captures ran in order %v, want %v", order, want)
		}
	}
	if peak > 2 {
		t.Errorf("%d captures ran at once, want at most 2", peak)
	}
	if m.Active("live-3") {
		t.Error("Active(live-3) after it ended")
	}
}
