// Package archive turns a job's records into objects: where each object lives (the layout), how a
// log is streamed into the store (gzip, size and sha256 on the fly) and what the per-job manifest
// holds.
package archive

import (
	"path"
	"strings"

	"github.com/jobvault/jobvault/pkg/db"
)

// Layout names the objects of a job archive. Keys read well in a bucket browser and never collide
// across restarts: Volcano recreates pods under the same name with a new UID, so every level that
// names an object also holds its UID.
//
//	<prefix>/<namespace>/<job>/<job-uid>/job.json
//	<prefix>/<namespace>/<job>/<job-uid>/manifest.json
//	<prefix>/<namespace>/<job>/<job-uid>/pods/<pod>/<pod-uid>/<container>.log.gz
//	<prefix>/<namespace>/<job>/<job-uid>/pods/<pod>/<pod-uid>/<container>.previous-<n>.log.gz
type Layout struct {
	// Prefix is prepended to every key; empty for none.
	Prefix string
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

// PodLog is the key of one container log instance (db.InstanceCurrent or db.PreviousInstance(n)).
func (l Layout) PodLog(j JobRef, pod, podUID, container, instance string) string {
	name := container + ".log.gz"
	if instance != db.InstanceCurrent {
		name = container + "." + instance + ".log.gz"
	}
	return path.Join(l.JobDir(j), "pods", pod, podUID, name)
}
