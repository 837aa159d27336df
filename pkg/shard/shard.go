// Package shard splits the VcJobs of a cluster between archiver replicas, the way kube-state-metrics
// shards its objects: each replica owns the jobs whose UID hashes to its shard, and a job's pods go
// to the job's shard. Webhook, archiver and tests compute it here, and nowhere else.
package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Shard is one replica's share: it owns the UIDs that hash to Index modulo Total. The zero value
// (Total 0) and Total 1 own everything, as one unsharded archiver does.
type Shard struct {
	Index, Total int
}

// Of is the shard index of a UID among total shards: FNV-1a (64 bits) of the UID modulo total.
// Stable across processes, versions and architectures: changing it would move every live job to
// another shard at an upgrade.
func Of(uid types.UID, total int) int {
	if total <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(uid))
	return int(h.Sum64() % uint64(total))
}

// Owns reports whether the job with this UID is the shard's.
func (s Shard) Owns(uid types.UID) bool {
	return s.Total <= 1 || Of(uid, s.Total) == s.Index
}

// Sharded reports whether the work is split between several replicas.
func (s Shard) Sharded() bool { return s.Total > 1 }

// String is "1/3", or "" when not sharded.
func (s Shard) String() string {
	if !s.Sharded() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Total)
}

// Validate checks 0 ≤ Index < Total.
func (s Shard) Validate() error {
	if s.Total < 1 || s.Index < 0 || s.Index >= s.Total {
		return fmt.Errorf("shard must be at least 0 and less than the total shards (at least 1), got shard %d of %d", s.Index, s.Total)
	}
	return nil
}

// FromPodName reads the shard index from a StatefulSet pod's name, its ordinal after the last
// '-' (jobvault-archiver-2 is shard 2).
func FromPodName(name string) (int, error) {
	if name == "" {
		return 0, errors.New("no pod name to take the shard from (set POD_NAME from metadata.name)")
	}
	i := strings.LastIndexByte(name, '-')
	ord := name[i+1:]
	n, err := strconv.Atoi(ord)
	if i < 0 || err != nil || strings.TrimLeft(ord, "0123456789") != "" {
		return 0, fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-N)", name)
	}
	return n, nil
}
