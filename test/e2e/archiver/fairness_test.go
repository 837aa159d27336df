package archiver

import (
	"bytes"
	"context"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestHostileNamespaceNeitherStarvesNorExhaustsTheArchiver: a hostile namespace runs more
// containers than the archiver has stream slots, each printing incompressible random bytes as
// fast as the pipeline takes them, and keeps running. Its captures take every slot, and each would
// hold up to a whole segment (8 MiB) in memory: more, together, than the archiver's memory limit
// (GOMEMLIMIT, as the archiver sets it from its container's). Meanwhile another namespace runs a
// job. That job's container gets a slot at once and its job is archived complete and byte-exact
// while the hostile containers go on, and the archiver's memory stays within its limit throughout.
func TestHostileNamespaceNeitherStarvesNorExhaustsTheArchiver(t *testing.T) {
	t.Parallel()
	const (
		slots      = 12
		hostiles   = slots + 2
		perHostile = 7 << 20 // what each hostile container writes: just under a segment
		line       = 4 << 10
		limitMiB   = 96 // the archiver's GOMEMLIMIT
	)
	env := testbed.Cluster(t)
	stack.Webhook(t, env)
	hostile, victim := env.Namespace(t), env.Namespace(t)
	a := stack.NewArchiver(t, env, testbed.Postgres(t), stack.Options{Backend: objstore.BackendFS, FSRoot: t.TempDir(),
		Namespaces: []string{hostile, victim}, Flags: []string{"--max-streams=" + strconv.Itoa(slots)}})
	a.Environ = append(a.Environ, "GOMEMLIMIT="+strconv.Itoa(limitMiB)+"MiB")
	a.Start(t)
	records, err := db.Open(t.Context(), a.DSN, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { records.Close() })
	s := &stack.Rig{Archiver: a, NS: victim, Records: records, Store: a.Store(t)}
	peak := sampleAnonRSS(t, a.Proc.PID())
	rt := env.Runtime(t, testbed.RuntimeOptions{})

	// The flood: every hostile container writes the same random lines (each stream on its own is
	// incompressible), 16 chunks a second.
	rng := rand.NewChaCha8([32]byte{1})
	var flood []testbed.Chunk
	for n := 0; n < perHostile; n += 16 * line {
		var b bytes.Buffer
		for range 16 {
			b.WriteString(randomLine(rng, line))
		}
		flood = append(flood, testbed.Chunk{Stream: "stdout", Data: b.Bytes()})
	}
	floodJob := testbed.Job(hostile, "flood").Task("w", hostiles, []string{"main"}, testbed.RunsFor("10m")).Obj()
	for i := range hostiles {
		rt.Run(t, hostile, testbed.PodName(floodJob.Name, "w", i), map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{flood}, Every: 60 * time.Millisecond}})
	}
	stack.CreateAs(t, env, "flooder", floodJob)
	deadline := time.Now().Add(time.Minute)
	for env.LogStreams(t) < slots {
		if time.Now().After(deadline) {
			t.Fatalf("%d log streams open a minute after the flood started, want every slot (%d) taken", env.LogStreams(t), slots)
		}
		time.Sleep(200 * time.Millisecond)
	}

	out := stack.SteadyOutput("victim", 20, 8<<10)
	job := testbed.Job(victim, "victim").Task("w", 1, []string{"main"}, testbed.RunsFor("5s")).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	rt.Run(t, victim, pod, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: 100 * time.Millisecond}})
	stack.CreateAs(t, env, "erin", job)
	created := time.Now()

	// Memory is judged once the flood is read: every slot but one (the victim's, or the one that
	// goes back to the flood once the victim's container ended) follows a whole flood.
	lines := (slots - 1) * perHostile / line
	deadline = time.Now().Add(90 * time.Second)
	for followedLines(t, s) < lines {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines followed 90 s after the victim's job was created, want the flood's %d in %d slots", followedLines(t, s), lines, slots-1)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if p := peak(); p > limitMiB<<20 {
		t.Errorf("the archiver's anonymous memory peaked at %d MiB, over its limit of %d MiB (GOMEMLIMIT)", p>>20, limitMiB)
	} else {
		t.Logf("the archiver's anonymous memory peaked at %d MiB (limit %d MiB)", p>>20, limitMiB)
	}

	// The victim's job was archived promptly, complete, byte-exact.
	j := s.WaitArchived(t, job, max(time.Until(created.Add(time.Minute)), time.Second))
	if at, err := time.Parse(time.RFC3339, j.Annotations[tracking.ArchivedAtAnnotation]); err != nil || at.Sub(created) > time.Minute {
		t.Errorf("victim's job archived at %s (%v), %s after it was created: want within a minute", at, err, at.Sub(created))
	}
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), wroteAll(t, s, rt, pod, out))
	if row, err := s.Records.Job(t.Context(), string(j.UID)); err != nil || row.ArchiveState != record.ArchiveArchived {
		t.Errorf("victim's job row %s (%v), want archived", row.ArchiveState, err)
	}
}

// randomLine is a line of n-1 incompressible bytes (no newline among them) and a newline.
func randomLine(rng *rand.ChaCha8, n int) string {
	b := make([]byte, n)
	_, _ = rng.Read(b)
	b = bytes.ReplaceAll(b[:n-1], []byte("\n"), []byte("x"))
	return string(b) + "\n"
}

// followedLines is how many lines the archiver's follow streams delivered (its lag histogram's count).
func followedLines(t *testing.T, s *stack.Rig) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^jobvault_archiver_capture_lag_seconds_count (\d+)`).FindStringSubmatch(s.Metrics(t))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// sampleAnonRSS samples the process's anonymous resident memory (its heap and stacks: what
// GOMEMLIMIT bounds, unlike the binary's mapped text) every 50 ms until the test ends, and
// returns a function that reports the peak seen so far.
func sampleAnonRSS(t *testing.T, pid int) func() int64 {
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		peak int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if st, err := p.NewStatus(); err == nil {
				mu.Lock()
				peak = max(peak, int64(st.RssAnon))
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}
