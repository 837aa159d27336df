package deploy

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

// TestArchiverRenamedFlags: the two repair loops' periods have names that say how they differ,
// --untracked-pod-sweep-period and --missed-event-sweep-period; their old names, --sweep-period
// and --resweep-period, still set them (deprecated), and giving both names of one is refused. The
// archiver checks its flags before it connects to anything, so a bad value shows which setting a
// name sets.
func TestArchiverRenamedFlags(t *testing.T) {
	bin := testbed.GoBuild(t, "./archiver")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--untracked-pod-sweep-period=0s"}, "untracked pod sweep period"},
		{[]string{"--sweep-period=0s"}, "untracked pod sweep period"},
		{[]string{"--missed-event-sweep-period=-1s"}, "missed event sweep period"},
		{[]string{"--resweep-period=-1s"}, "missed event sweep period"},
		{[]string{"--sweep-period=1m", "--untracked-pod-sweep-period=2m"}, "--sweep-period is the deprecated name of --untracked-pod-sweep-period"},
		{[]string{"--resweep-period=1m", "--missed-event-sweep-period=2m"}, "--resweep-period is the deprecated name of --missed-event-sweep-period"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := exec.Command(bin, append([]string{"--db-dsn=postgres://127.0.0.1:1/x", "--store-backend=fs", "--store-fs-root=" + t.TempDir()}, tc.args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "invalid configuration") || !strings.Contains(string(out), tc.want) {
				t.Errorf("archiver %s: %v\n%s\nwant an invalid configuration naming %q", strings.Join(tc.args, " "), err, out, tc.want)
			}
		})
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	for _, old := range []string{"sweep-period", "resweep-period"} {
		if !strings.Contains(string(help), "  -"+old+" value\n    \tDeprecated:") {
			t.Errorf("archiver --help does not mark --%s deprecated:\n%s", old, help)
		}
	}
}
