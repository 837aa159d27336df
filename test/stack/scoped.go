package stack

import (
	"context"
	"testing"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/test/testbed"
)

// NewScopedRig is NewRig with the webhook served in this process (ServeWebhook) and registered
// for the rig's namespace only, instead of the webhook binary registered cluster-wide: the other
// namespaces of the test process stay without a webhook, as while it is down. The archiver runs as
// ArchiverUser with config/archiver's ClusterRole, as in NewRig.
func NewScopedRig(t testing.TB, backend string, flags ...string) *Rig {
	t.Helper()
	env := testbed.Cluster(t)
	s := &Rig{NS: env.Namespace(t)}
	ServeWebhook(t, env).Register(t, env, []string{s.NS}, nil)
	s.Archiver = NewArchiver(t, env, testbed.Postgres(t), Options{Backend: backend, FSRoot: t.TempDir(),
		Namespaces: []string{s.NS}, Flags: flags})
	s.Store = s.Archiver.Store(t)
	s.Start(t)
	var err error
	if s.Records, err = db.Open(context.Background(), s.DSN, db.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Records.Close() })
	return s
}
