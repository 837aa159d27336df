package stack

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
func StartAgent(t testbed.T, s *Rig, node, podLogsDir string, flags ...string) *Agent {
	t.Helper()
	a := &Agent{Args: []string{"agent", "--node=" + node, "--pod-logs-dir=" + podLogsDir, "--db-dsn=" + agentDSN(t, s.DSN)}, Environ: s.Environ}
	for _, arg := range s.Args {
		if strings.HasPrefix(arg, "--store-") { // the rig's store, its prefix included
			a.Args = append(a.Args, arg)
		}
	}
	a.Args = append(a.Args, flags...)
	a.Start(t)
	return a
}

// agentDSN is dsn as a login role of its own in jobvault_agent (migration 0013), dropped when the
// test ends: the agent runs with the least privilege config/agent gives it, so that anything it
// needs beyond that role fails the test.
func agentDSN(t testbed.T, dsn string) string {
	t.Helper()
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("jv_test_agent_%d", rand.Uint32())
	if _, err := admin.Exec(`CREATE ROLE ` + name + ` LOGIN IN ROLE jobvault_agent`); err != nil {
		t.Fatalf("create the agent's login role: %v", err)
	}
	t.Cleanup(func() { // after the agent stopped (registered later, so run earlier)
		if admin, err := sql.Open("postgres", dsn); err == nil {
			if _, err := admin.Exec(`DROP ROLE IF EXISTS ` + name); err != nil {
				t.Logf("drop the agent's login role %s: %v", name, err)
			}
			admin.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	return u.String()
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
