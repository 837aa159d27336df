// Package archive turns a job's records into objects: where each object lives (the layout), how a
// log is streamed into the store (gzip, size and sha256 on the fly) and what the per-job manifest
// holds.
package archive

import (
	"errors"
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

// ErrInvalidComponent is returned (wrapped) for a key component that is not exactly one path
// segment. It is permanent: the same input is refused every time.
var ErrInvalidComponent = errors.New("invalid key component")

// maxComponentLen bounds one component: the longest name Kubernetes gives an object (a DNS
// subdomain, 253 bytes) so that the whole key stays within objstore's limit.
const maxComponentLen = 253

// segment checks that s, the component named what, is exactly one path segment: non-empty, at most
// maxComponentLen bytes of UTF-8 without control characters or '/', and neither "." nor "..". It
// refuses rather than cleans: a component a tenant chose (an owner reference's name or UID) must
// never be turned into another job's directory, as path.Join would turn "../victim-ns/victim".
func segment(what, s string) error {
	var reason string
	switch {
	case s == "":
		reason = "empty"
	case s == "." || s == "..":
		reason = "a relative path element"
	case len(s) > maxComponentLen:
		reason = fmt.Sprintf("longer than %d bytes", maxComponentLen)
	case strings.Contains(s, "/"):
		reason = "contains /"
	case objstore.ValidateKey(s) != nil:
		reason = "not valid UTF-8, or contains a control character"
	}
	if reason != "" {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalidComponent, what, s, reason)
	}
	return nil
}

// Validate checks that each of the job's namespace, name and UID is exactly one path segment.
func (j JobRef) Validate() error {
	return errors.Join(segment("namespace", j.Namespace), segment("job name", j.Name), segment("job UID", j.UID))
}

// podDir validates a pod's components and returns the key prefix of its objects.
func (l Layout) podDir(j JobRef, pod, podUID, container string) (string, error) {
	dir, err := l.JobDir(j)
	if err != nil {
		return "", err
	}
	if err := errors.Join(segment("pod name", pod), segment("pod UID", podUID), segment("container name", container)); err != nil {
		return "", err
	}
	// The file name is <container>[.<instance>].log.gz: a dot in the container's name could make one
	// container's log the name of another's instance. Kubernetes' container names have none.
	if strings.Contains(container, ".") {
		return "", fmt.Errorf("%w: container name %q: contains a dot", ErrInvalidComponent, container)
	}
	return dir + "/pods/" + pod + "/" + podUID, nil
}

// JobDir is the key prefix of everything archived for the job, without a trailing slash; an error
// (ErrInvalidComponent) if a component is not exactly one path segment.
func (l Layout) JobDir(j JobRef) (string, error) {
	if err := j.Validate(); err != nil {
		return "", fmt.Errorf("key of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	dir := j.Namespace + "/" + j.Name + "/" + j.UID
	if p := strings.Trim(l.Prefix, "/"); p != "" {
		dir = p + "/" + dir
	}
	return dir, nil
}

// JobObject is the key of the job's final object.
func (l Layout) JobObject(j JobRef) (string, error) { return l.inJobDir(j, "job.json") }

// Manifest is the key of the job's manifest.
func (l Layout) Manifest(j JobRef) (string, error) { return l.inJobDir(j, "manifest.json") }

func (l Layout) inJobDir(j JobRef, name string) (string, error) {
	dir, err := l.JobDir(j)
	if err != nil {
		return "", err
	}
	return dir + "/" + name, nil
}

// PodLog is the key of one container log instance (record.InstanceCurrent or
// record.PreviousInstance(n)); an error (ErrInvalidComponent) if a component is not one path
// segment.
func (l Layout) PodLog(j JobRef, pod, podUID, container, instance string) (string, error) {
	dir, err := l.podDir(j, pod, podUID, container)
	if err != nil {
		return "", fmt.Errorf("key of the log of %s/%s: %w", j.Namespace, pod, err)
	}
	if instance == record.InstanceCurrent {
		return dir + "/" + container + ".log.gz", nil
	}
	if n, ok := strings.CutPrefix(instance, "previous-"); !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return "", fmt.Errorf("key of the log of %s/%s: %w: instance %q: neither %s nor previous-<n>",
			j.Namespace, pod, ErrInvalidComponent, instance, record.InstanceCurrent)
	}
	return dir + "/" + container + "." + instance + ".log.gz", nil
}

// LayoutOf returns the layout in which dir (a key prefix, without trailing slash) is the job's
// directory, and false if dir is not the job's directory in any layout. Readers use it to find an
// archive from the location its records hold, whatever prefix it was written under.
func LayoutOf(j JobRef, dir string) (Layout, bool) {
	rel := j.Namespace + "/" + j.Name + "/" + j.UID
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

// StreamsSuffix ends the key of a log's stream index, stored beside the log (its key plus this
// suffix; see pkg/capture's stream index).
const StreamsSuffix = ".streams"

// Segment is the key of one segment of a container run's log (run: its restart count) while the
// run is captured; segments are deleted once assembled into the run's PodLog object.
func (l Layout) Segment(j JobRef, pod, podUID, container string, run, seq int32) (string, error) {
	dir, err := l.podDir(j, pod, podUID, container)
	if err != nil {
		return "", fmt.Errorf("key of a log segment of %s/%s: %w", j.Namespace, pod, err)
	}
	return dir + "/" + fmt.Sprintf("%s.run-%d.seg-%06d.gz", container, run, seq), nil
}
