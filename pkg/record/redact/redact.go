// Package redact keeps tenants' secrets out of jobvault's record: a VcJob is recorded (rows,
// job.json, the manifest) with every string outside an allow-list of the fields audits need
// replaced by its sha256 marker. It sits with what it protects, the record (pkg/record), in a
// package of its own: the record's value types are shared by the database (pkg/db, which needs
// no Kubernetes type), the node agent and the CLI, and none of them needs the Volcano types that
// redaction walks.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

const (
	// lastAppliedAnnotation is kubectl's copy of the whole object as last applied: it repeats every
	// value of the spec, secrets included, so it is never kept (it is not on the allow-list).
	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// MarkerPrefix starts the marker that replaces a string the allow-list does not keep:
	// MarkerPrefix followed by the value's sha256 in lower-case hex.
	MarkerPrefix = "redacted:sha256:"
)

// markerPattern matches a marker. A value already in this form is kept as it is: that makes
// redaction idempotent (jobs are cached redacted and redacted again when recorded), and a marker
// holds nothing but a hash.
var markerPattern = regexp.MustCompile(`^redacted:sha256:[0-9a-f]{64}$`)

// podSpecKept are the fields of a task's pod template (relative to its spec) that are recorded
// as they are: what ran (images, resources, mounts, volumes by source and name), where and as
// whom (scheduling, service account, security context), and where each env value and secret came
// from (names, valueFrom, envFrom, secret and config map names). What the containers were told
// (command, args, literal env values, probes, lifecycle hooks, host aliases, DNS config) and the
// free-form options of volume drivers (CSI volumeAttributes, flexVolume options) are not.
var podSpecKept = func() []string {
	var kept []string
	for _, c := range []string{"initContainers", "containers", "ephemeralContainers"} {
		for _, f := range []string{"name", "image", "imagePullPolicy", "ports", "env.name", "env.valueFrom", "envFrom",
			"resources", "resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "workingDir", "securityContext",
			"terminationMessagePath", "terminationMessagePolicy", "targetContainerName"} {
			kept = append(kept, c+"."+f)
		}
	}
	for _, f := range []string{"name", "hostPath", "emptyDir", "secret", "configMap", "persistentVolumeClaim", "projected",
		"downwardAPI", "nfs", "image", "ephemeral.volumeClaimTemplate.spec",
		"csi.driver", "csi.readOnly", "csi.fsType", "csi.nodePublishSecretRef",
		"flexVolume.driver", "flexVolume.fsType", "flexVolume.readOnly", "flexVolume.secretRef"} {
		kept = append(kept, "volumes."+f)
	}
	return append(kept, "restartPolicy", "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy",
		"nodeSelector", "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName",
		"hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
		"subdomain", "affinity", "schedulerName", "tolerations", "priorityClassName", "priority", "runtimeClassName",
		"enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os",
		"hostUsers", "schedulingGates", "resourceClaims", "resources", "readinessGates")
}()

// keptPaths is the allow-list: the fields of a VcJob, as JSON paths with list indexes left out
// and map keys as a last segment, whose strings are recorded as they are; everything under a kept
// path is kept. Every other string of the job is recorded as its marker (see redactValue).
var keptPaths = func() map[string]bool {
	kept := map[string]bool{}
	for _, p := range []string{"apiVersion", "kind",
		"metadata.name", "metadata.generateName", "metadata.namespace", "metadata.uid", "metadata.resourceVersion",
		"metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.finalizers", "metadata.ownerReferences",
		"metadata.labels",
		"spec.schedulerName", "spec.queue", "spec.priorityClassName", "spec.policies", "spec.runningEstimate",
		"spec.networkTopology", "spec.volumes.mountPath", "spec.volumes.volumeClaimName", "spec.volumes.volumeClaim",
		"spec.tasks.name", "spec.tasks.policies", "spec.tasks.topologyPolicy", "spec.tasks.dependsOn",
		"spec.tasks.partitionPolicy", "spec.tasks.template.metadata.name", "spec.tasks.template.metadata.labels",
		"status"} {
		kept[p] = true
	}
	for _, f := range podSpecKept {
		kept["spec.tasks.template.spec."+f] = true
	}
	return kept
}()

// keptAnnotationPrefix: the job's annotations under it are jobvault's own (submitter, admission,
// archive results, release and legal hold), which the archiver reads from its cached, redacted
// jobs, and which the policies guard. Any other annotation's value is another tool's or the
// tenant's, and is redacted.
const keptAnnotationPrefix = "metadata.annotations." + tracking.Prefix

// kept reports whether the allow-list keeps the strings at path.
func kept(path string) bool {
	if strings.HasPrefix(path, keptAnnotationPrefix) {
		return true
	}
	for i := range len(path) {
		if path[i] == '.' && keptPaths[path[:i]] {
			return true
		}
	}
	return keptPaths[path]
}

// redactValue is what is recorded of a string the allow-list does not keep: nothing for an empty
// one, the value itself if it is already a marker, otherwise a marker holding its sha256.
func redactValue(v string) string {
	if v == "" || markerPattern.MatchString(v) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return MarkerPrefix + hex.EncodeToString(sum[:])
}

// Job replaces, in place, every string of the job outside the allow-list (keptPaths) by its
// marker (redactValue): the values of maps and lists as well as fields; map keys are kept. Values
// the API server parses (quantities, times, durations) are kept: they are numbers. Applied twice
// it changes nothing more (the archiver caches jobs redacted, and redacts them again when it
// records them).
func Job(job *batchv1alpha1.Job) {
	redactIn(reflect.ValueOf(job).Elem(), "")
}

var (
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	// parsedTypes hold no free text: the API server parses them (a quantity, a time, a duration).
	parsedTypes = map[reflect.Type]bool{reflect.TypeFor[resource.Quantity](): true, reflect.TypeFor[metav1.Time](): true,
		reflect.TypeFor[metav1.MicroTime](): true, reflect.TypeFor[metav1.Duration](): true}
)

// redactIn walks v, at JSON path path, redacting the strings outside the allow-list.
func redactIn(v reflect.Value, path string) {
	if path != "" && kept(path) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			redactIn(v.Elem(), path)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(redactValue(v.String()))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			redactIn(v.Index(i), path)
		}
	case reflect.Map:
		redactMap(v, path)
	case reflect.Struct:
		redactStruct(v, path)
	}
}

// redactMap redacts the map's values (copied out, as map values cannot be set in place) under
// path "<path>.<key>"; keys are kept.
func redactMap(v reflect.Value, path string) {
	iter := v.MapRange()
	type entry struct{ k, v reflect.Value }
	var changed []entry
	for iter.Next() {
		if iter.Key().Kind() != reflect.String {
			continue
		}
		val := reflect.New(v.Type().Elem()).Elem()
		val.Set(iter.Value())
		redactIn(val, path+"."+iter.Key().String())
		changed = append(changed, entry{iter.Key(), val})
	}
	for _, e := range changed {
		v.SetMapIndex(e.k, e.v)
	}
}

// redactStruct redacts the struct's exported fields under their JSON names (an inline field at
// the struct's own path). An IntOrString's string form is redacted as the field's value.
func redactStruct(v reflect.Value, path string) {
	t := v.Type()
	if parsedTypes[t] {
		return
	}
	if t == intOrStringType {
		redactIn(v.FieldByName("StrVal"), path)
		return
	}
	for _, f := range structFields(t) {
		fv := v.Field(f.index)
		switch {
		case fv.IsZero():
			// nothing to redact
		case f.inline:
			redactIn(fv, path)
		case path == "":
			redactIn(fv, f.name)
		default:
			redactIn(fv, path+"."+f.name)
		}
	}
}

// jsonField is an exported struct field as encoding/json names it.
type jsonField struct {
	index  int
	name   string
	inline bool
}

// fieldsByType caches structFields: the cache redacts every job it holds.
var fieldsByType sync.Map // reflect.Type -> []jsonField

// structFields lists t's exported fields with their JSON names, as encoding/json does for the
// API's types: the name from the json tag, an untagged embedded struct inline, "-" left out.
func structFields(t reflect.Type) []jsonField {
	if fs, ok := fieldsByType.Load(t); ok {
		return fs.([]jsonField)
	}
	var fs []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && (f.Anonymous || strings.Contains(opts, "inline")):
			fs = append(fs, jsonField{index: i, inline: true})
		case name == "":
			fs = append(fs, jsonField{index: i, name: f.Name})
		default:
			fs = append(fs, jsonField{index: i, name: name})
		}
	}
	fieldsByType.Store(t, fs)
	return fs
}
