package apiserver

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/record"
)

// archivedJob is the summary of a job's record that a list returns: no transitions, no pods.
func archivedJob(j record.Job) v1alpha1.ArchivedJob {
	return v1alpha1.ArchivedJob{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ArchivedJob"},
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name, Namespace: j.Namespace, UID: types.UID(j.UID),
			CreationTimestamp: metav1.NewTime(j.CreatedAt), Labels: j.Labels,
		},
		Spec: v1alpha1.ArchivedJobSpec{
			Cluster: j.Cluster, Queue: j.Queue, Submitter: j.Submitter, SubmitterGroups: j.SubmitterGroups,
			AdmittedAt: metaTime(j.AdmittedAt),
		},
		Status: v1alpha1.ArchivedJobStatus{
			Phase: j.Phase, RetryCount: j.RetryCount, FinishedAt: metaTime(j.FinishedAt),
			ArchiveState: string(stateOf(j.ArchiveState)), ArchiveLocation: j.ArchiveLocation,
			ArchivedAt: metaTime(j.ArchivedAt), ReleaseReason: j.ReleaseReason,
		},
	}
}

// stateOf spells the empty state as the pending it means.
func stateOf(s record.ArchiveState) record.ArchiveState {
	if s == "" {
		return record.ArchivePending
	}
	return s
}

// jobDetail is a job's record in full: the summary, its transitions and its pods, each with its
// containers' log instances and gaps.
type jobDetail struct {
	job         record.Job
	transitions []record.Transition
	pods        []record.Pod
	logs        []record.LogObject
	gaps        []record.Gap
}

// archivedJobDetail turns a job's whole record into the object a get returns.
func archivedJobDetail(d jobDetail) v1alpha1.ArchivedJob {
	out := archivedJob(d.job)
	for _, t := range d.transitions {
		out.Status.Transitions = append(out.Status.Transitions, v1alpha1.PhaseTransition{
			Phase: t.Phase, Time: metav1.NewTime(t.Time), Reason: t.Reason, Message: t.Message})
	}
	byPod := map[string]*v1alpha1.ArchivedPod{}
	out.Status.Pods = make([]v1alpha1.ArchivedPod, 0, len(d.pods))
	for _, p := range d.pods {
		out.Status.Pods = append(out.Status.Pods, v1alpha1.ArchivedPod{
			Name: p.Name, UID: p.UID, Task: p.Task, Node: p.Node, Phase: p.Phase,
			CreatedAt: metav1.NewTime(p.CreatedAt), StartedAt: metaTime(p.StartedAt), FinishedAt: metaTime(p.FinishedAt),
			DeletedBeforeTerminal: p.DeletedBeforeTerminal, ArchiveState: string(stateOf(p.ArchiveState)),
			ReleaseReason: p.ReleaseReason,
		})
	}
	for i := range out.Status.Pods {
		byPod[out.Status.Pods[i].UID] = &out.Status.Pods[i]
	}
	for _, l := range d.logs {
		pod := byPod[l.PodUID]
		if pod == nil {
			continue // a log row always has its pod row (foreign key); defensive
		}
		c := container(pod, l.Container, string(l.ContainerType))
		c.Instances = append(c.Instances, v1alpha1.LogInstance{Name: l.Instance, State: string(l.State),
			Bytes: l.Bytes, StoredBytes: l.StoredBytes, SHA256: l.SHA256, Reason: l.Reason})
	}
	for _, g := range d.gaps {
		pod := byPod[g.PodUID]
		if pod == nil {
			continue
		}
		c := container(pod, g.Container, "")
		gap := v1alpha1.LogGap{Run: g.Run, Reason: string(g.Reason), Detail: g.Detail}
		if !g.After.IsZero() { // zero: from the run's start
			gap.After = metaTime(&g.After)
		}
		if !g.Before.IsZero() {
			gap.Before = metaTime(&g.Before)
		}
		c.Gaps = append(c.Gaps, gap)
	}
	return out
}

// container finds (or appends) a pod's container by name; typ fills the type when it is known.
func container(pod *v1alpha1.ArchivedPod, name, typ string) *v1alpha1.ArchivedContainer {
	for i := range pod.Containers {
		if c := &pod.Containers[i]; c.Name == name {
			if c.Type == "" {
				c.Type = typ
			}
			return c
		}
	}
	pod.Containers = append(pod.Containers, v1alpha1.ArchivedContainer{Name: name, Type: typ})
	return &pod.Containers[len(pod.Containers)-1]
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}
