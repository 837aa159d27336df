package shard

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// TestOfIsFNV1a pins the hash to FNV-1a 64 (reference values from the FNV specification): a
// change would move live jobs between shards at an upgrade.
func TestOfIsFNV1a(t *testing.T) {
	for _, tc := range []struct {
		uid  types.UID
		hash uint64
	}{{"", 0xcbf29ce484222325}, {"a", 0xaf63dc4c8601ec8c}, {"foobar", 0x85944171f73967e8}} {
		for _, total := range []int{2, 3, 7, 64} {
			if got, want := Of(tc.uid, total), int(tc.hash%uint64(total)); got != want {
				t.Errorf("Of(%q, %d) = %d, want %d", tc.uid, total, got, want)
			}
		}
	}
}

// TestOwnsSplitsEvenlyAndOnce: every UID is owned by exactly one shard, and shards get about the
// same share.
func TestOwnsSplitsEvenlyAndOnce(t *testing.T) {
	const n, total = 30000, 3
	count := make([]int, total)
	for range n {
		uid := uuid.NewUUID()
		owners := 0
		for i := range total {
			if (Shard{Index: i, Total: total}).Owns(uid) {
				owners++
				count[i]++
			}
		}
		if owners != 1 {
			t.Fatalf("UID %s owned by %d shards, want 1", uid, owners)
		}
	}
	for i, c := range count {
		if c < n/total*95/100 || c > n/total*105/100 {
			t.Errorf("shard %d owns %d of %d UIDs, want within 5%% of %d", i, c, n, n/total)
		}
	}
	if !(Shard{}).Owns("x") || !(Shard{Index: 0, Total: 1}).Owns("x") {
		t.Error("an unsharded archiver must own everything")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		s  Shard
		ok bool
	}{{Shard{0, 1}, true}, {Shard{2, 3}, true}, {Shard{3, 3}, false}, {Shard{-1, 3}, false}, {Shard{0, 0}, false}} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.s, err, tc.ok)
		}
	}
}

func TestFromPodName(t *testing.T) {
	for name, want := range map[string]int{"jobvault-archiver-0": 0, "jobvault-archiver-12": 12, "a-2": 2} {
		if got, err := FromPodName(name); err != nil || got != want {
			t.Errorf("FromPodName(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for _, name := range []string{"", "archiver", "jobvault-archiver-7d9f8-x2x", "archiver-+1"} {
		if got, err := FromPodName(name); err == nil {
			t.Errorf("FromPodName(%q) = %d, want an error", name, got)
		} else if name != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("FromPodName(%q): error %q does not name the pod", name, err)
		}
	}
}
