package audit

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// TestSealSweepsAgentSegments (issue 25): a segment object of the node agent (its key ends in
// .agent) stored and never recorded (its record refused after a take-over, or the agent killed
// between the two steps) is swept when the job is sealed, as the API capture's are, and audit
// verify finds nothing extra.
func TestSealSweepsAgentSegments(t *testing.T) {
	r := stack.NewChainRig(t)
	var orphans []string
	r.AfterLog = func(ctx context.Context, ref archive.JobRef, pod record.Pod, _ string) error {
		for seq := range int32(2) {
			key := stack.Must(r.Sealer.Layout.Segment(ref, pod.Name, pod.UID, "main", 0, seq)) + ".agent"
			if err := r.Store.Put(ctx, key, strings.NewReader("not gzip, never recorded"), objstore.PutOptions{}); err != nil {
				return err
			}
			orphans = append(orphans, key)
		}
		return nil
	}
	r.Build(t, 2, 1, 0)
	for _, key := range orphans {
		if _, err := r.Store.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("agent segment %s left in the store after its job was sealed (%v)", key, err)
		}
	}
	if rep := r.Verify(t); !rep.OK() {
		t.Errorf("audit verify: %v, want nothing", rep.Findings)
	}
}
