// Package archive turns a job's records into objects: where each object lives (the layout), how a
// log is streamed into the store (gzip, size and sha256 on the fly) and what the per-job manifest
// holds.
package archive

import (
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Layout names the objects of a job archive. Keys read well in a bucket browser and never collide
// across restarts: Volcano recreates pods under the same name with a new UID, so every level that
// names an object also holds its UID.
//
//	<prefix>/<namespace>/<job>/<job-uid>/job.json
//	<prefix>/<namespace>/<job>/<job-uid>/manifest.json
//	<prefix>/<namespace>/<job>/<job-uid>/pods/<pod>/<pod-uid>/<container>.log.gz
//	<prefix>/<namespace>/<job>/<job-uid>/pods/<pod>/<pod-uid>/<container>.previous-<n>.log.gz
//
// The layout owns the key prefix: the archiver writes under it, and the records keep the keys and
// the location it produced, so readers never need it again.
type Layout struct {
	// Prefix is prepended to every key; empty for none.
	Prefix string
}

// BindFlags registers --store-prefix on fs, writing into l.
func (l *Layout) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&l.Prefix, "store-prefix", "",
		"Key prefix under which every archive is written, without leading or trailing slash (e.g. prod/eu-1).")
}

// Validate checks that the prefix is a valid key.
func (l Layout) Validate() error {
	if l.Prefix == "" {
		return nil
	}
	if err := objstore.ValidateKey(l.Prefix); err != nil {
		return fmt.Errorf("--store-prefix: %w", err)
	}
	return nil
}

// JobRef identifies a job's archive.
type JobRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// JobDir is the key prefix of everything archived for the job, without a trailing slash.
func (l Layout) JobDir(j JobRef) string {
	return path.Join(strings.Trim(l.Prefix, "/"), j.Namespace, j.Name, j.UID)
}

// JobObject is the key of the job's final object.
func (l Layout) JobObject(j JobRef) string { return l.JobDir(j) + "/job.json" }

// Manifest is the key of the job's manifest.
func (l Layout) Manifest(j JobRef) string { return l.JobDir(j) + "/manifest.json" }

// PodLog is the key of one container log instance (record.InstanceCurrent or record.PreviousInstance(n)).
func (l Layout) PodLog(j JobRef, pod, podUID, container, instance string) string {
	name := container + ".log.gz"
	if instance != record.InstanceCurrent {
		name = container + "." + instance + ".log.gz"
	}
	return path.Join(l.JobDir(j), "pods", pod, podUID, name)
}

// LayoutOf returns the layout in which dir (a key prefix, without trailing slash) is the job's
// directory, and false if dir is not the job's directory in any layout. Readers use it to find an
// archive from the location its records hold, whatever prefix it was written under.
func LayoutOf(j JobRef, dir string) (Layout, bool) {
	rel := path.Join(j.Namespace, j.Name, j.UID)
	if dir == rel {
		return Layout{}, true
	}
	prefix, ok := strings.CutSuffix(dir, "/"+rel)
	return Layout{Prefix: prefix}, ok && prefix != ""
}

// JobDirOfLog returns the job directory of a key made by PodLog.
func JobDirOfLog(key string) string {
	// <job dir>/pods/<pod>/<pod-uid>/<file>
	return path.Dir(path.Dir(path.Dir(path.Dir(key))))
}

// Segment is the key of one segment of a container run's log (run: its restart count) while the
// run is captured; segments are deleted once assembled into the run's PodLog object.
func (l Layout) Segment(j JobRef, pod, podUID, container string, run, seq int32) string {
	return path.Join(l.JobDir(j), "pods", pod, podUID, fmt.Sprintf("%s.run-%d.seg-%06d.gz", container, run, seq))
}
