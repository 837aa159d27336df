package capture

import (
	"os"
	"strings"
	"syscall"
)

// killAt and killMarker are a test hook, set by the environment variable
// JOBVAULT_TEST_KILL_AT=<point>:<marker file>: the first time a capture reaches point
// ("segment-stored": a segment's object is stored and not yet recorded; "segment-recorded": it is
// recorded), the process kills itself (SIGKILL) after creating the marker file, which keeps the
// restarted process from doing it again. It proves that a crash between the steps of a two-step
// write loses, duplicates and leaves behind nothing. Never set it in production.
var killAt, killMarker, _ = strings.Cut(os.Getenv("JOBVAULT_TEST_KILL_AT"), ":")

// killPoint kills the process at point, once, if the test hook asks for it (killAt).
func killPoint(point string) {
	if killAt == "" || point != killAt {
		return
	}
	f, err := os.OpenFile(killMarker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // killed there once already
	}
	_ = f.Close()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process; nothing after the point runs
}
