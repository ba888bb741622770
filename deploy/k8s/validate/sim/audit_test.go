package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jobFrom builds the Job `kubectl create job <name> --from=cronjob/<cj>`
// creates: the CronJob's job template, marked as made by hand, owned by
// the CronJob.
func jobFrom(cj *batchv1.CronJob, name string) *batchv1.Job {
	annotations := map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}
	for k, v := range cj.Spec.JobTemplate.Annotations {
		annotations[k] = v
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cj.Namespace,
			Labels:      cj.Spec.JobTemplate.Labels,
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj,
				batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
		Spec: cj.Spec.JobTemplate.Spec,
	}
}

// TestAuditJobFromCronJob runs the runbooks' one-off audit as they say
// (docs/OPERATIONS.md, HeadcountCountDrift): the chart's audit CronJob is
// suspended, so it starts nothing by itself, and a Job made from it the
// way `kubectl create job --from=cronjob/...` makes one is accepted by
// the API server, scheduled by the real scheduler and run to its end by
// the fake kubelet, in a pod of its own running `cleaner audit`. The
// repair CronJob stays suspended whatever audit.suspend says.
func TestAuditJobFromCronJob(t *testing.T) {
	ctx := needCluster(t, 5*time.Minute)
	ns := namespace(ctx, t, "audit")
	volume(ctx, t)
	const rel = "aud"
	helm(t, "install", rel, chartDir, "-n", ns)
	waitAvailable(ctx, t, ns, rel)

	cjs, err := cs.BatchV1().CronJobs(ns).List(ctx, releaseSelector(rel))
	if err != nil {
		t.Fatal(err)
	}
	var audit *batchv1.CronJob
	for i := range cjs.Items {
		cj := &cjs.Items[i]
		if cj.Spec.Suspend == nil || !*cj.Spec.Suspend {
			t.Errorf("CronJob %s is not suspended by default", cj.Name)
		}
		if cj.Name == rel+"-headcount-audit" {
			audit = cj
		}
	}
	if audit == nil {
		t.Fatalf("no CronJob %s-headcount-audit among %d", rel, len(cjs.Items))
	}
	job, err := cs.BatchV1().Jobs(ns).Create(ctx, jobFrom(audit, audit.Name+"-by-hand"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubectl create job --from=cronjob/%s: %v", audit.Name, err)
	}
	start := time.Now()
	err = poll(ctx, func() error {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				if c.Type == batchv1.JobFailed {
					return fmt.Errorf("job failed: %s", c.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("job %s: %d active, %d succeeded, %d failed", j.Name, j.Status.Active, j.Status.Succeeded, j.Status.Failed)
	})
	if err != nil {
		t.Fatalf("the audit Job did not finish: %v\n%s", err, podSummary(ctx, ns))
	}
	t.Logf("the audit Job completed after %s", time.Since(start).Round(100*time.Millisecond))

	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("the audit Job ran %d pods, want 1 (backoffLimit 0)", len(pods.Items))
	}
	p := pods.Items[0]
	c := p.Spec.Containers[0]
	if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, []string{"/usr/local/bin/cleaner", "audit"}) {
		t.Errorf("the audit pod runs %q, want cleaner audit", got)
	}
	if p.Spec.NodeName == "" {
		t.Errorf("the audit pod was never scheduled")
	}
	// Nothing else started a Job: the CronJobs are suspended.
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Errorf("%d Jobs in the namespace, want only the one made by hand", len(jobs.Items))
	}
}
