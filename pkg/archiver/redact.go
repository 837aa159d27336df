package archiver

import (
	corev1 "k8s.io/api/core/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
)

const (
	// lastAppliedAnnotation is kubectl's copy of the whole object as last applied: it repeats every
	// literal env value.
	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// Redacted replaces a literal env value in what is recorded.
	Redacted = "<redacted>"
)

// recordable is the job as jobvault records it (rows, job.json, the manifest): with Redact, a copy
// whose pod templates' literal env values are replaced by Redacted and without kubectl's
// last-applied configuration, since both often hold secrets and the records are for auditors. Env
// names and valueFrom references are kept: they say where a value came from, never what it was.
func (o Options) recordable(job *batchv1alpha1.Job) *batchv1alpha1.Job {
	out := job.DeepCopy()
	out.ManagedFields = nil
	if o.Redact {
		redact(out)
	}
	return out
}

// redact replaces the literal env values of the job's pod templates by Redacted and drops kubectl's
// last-applied configuration, in place. Applied twice it changes nothing more (jobTransform caches
// jobs redacted, and recordable redacts them again).
func redact(job *batchv1alpha1.Job) {
	delete(job.Annotations, lastAppliedAnnotation)
	for i := range job.Spec.Tasks {
		spec := &job.Spec.Tasks[i].Template.Spec
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for j := range cs {
				for k := range cs[j].Env {
					if cs[j].Env[k].Value != "" {
						cs[j].Env[k].Value = Redacted
					}
				}
			}
		}
	}
}
