package stack

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/test/testbed"
)

// Agent is a node agent (`archiver agent`, config/agent) writing to a rig's database and store.
type Agent struct {
	// Args are its flags, without the metrics and probe addresses; Environ its extra environment
	// (the store's credentials).
	Args, Environ []string
	// MetricsAddr is where it serves /metrics.
	MetricsAddr string
	Proc        *testbed.Process
}

// StartAgent starts the agent of node, reading the kubelet's pod logs under podLogsDir, for the
// rig's database and store, and waits until it has recorded a heartbeat (its /healthz), so that
// the archiver gives it the node's runs.
func StartAgent(t testing.TB, s *Rig, node, podLogsDir string, flags ...string) *Agent {
	t.Helper()
	a := &Agent{Args: []string{"agent", "--node=" + node, "--pod-logs-dir=" + podLogsDir, "--db-dsn=" + LoginRole(t, s.DSN, "jobvault_agent")}, Environ: s.Environ}
	for _, arg := range s.Args {
		if strings.HasPrefix(arg, "--store-") { // the rig's store, its prefix included
			a.Args = append(a.Args, arg)
		}
	}
	a.Args = append(a.Args, flags...)
	a.Start(t)
	return a
}

// Start runs the agent (again) with its Args and waits until it is healthy.
func (a *Agent) Start(t testbed.T) {
	t.Helper()
	probe := testbed.FreePort(t)
	a.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testbed.FreePort(t))
	args := append(append([]string(nil), a.Args...), "--metrics-bind-address="+a.MetricsAddr, "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probe))
	cmd := exec.Command(testbed.GoBuild(t, "./archiver"), args...)
	cmd.Env = append(os.Environ(), a.Environ...)
	a.Proc = testbed.Start(t, "agent", cmd)
	a.Proc.WaitReady(t, "http://127.0.0.1:"+strconv.Itoa(probe)+"/healthz", time.Minute)
}

// Metrics returns what the running agent's /metrics serves.
func (a *Agent) Metrics(t testbed.T) string {
	t.Helper()
	return scrape(t, "agent", a.MetricsAddr)
}
