package detector

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/report"
)

// reportLoop evaluates every policy each tick until ctx ends.
func (d *Detector) reportLoop(ctx context.Context) error {
	t := d.opts.Clock.NewTicker(d.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			d.evaluate(ctx)
		}
	}
}

// evaluate advances every policy's window, picks its candidates and writes
// its report when report.Decide says so. API calls happen outside the
// sketch's lock, so ingest never waits for the API server.
func (d *Detector) evaluate(ctx context.Context) {
	defer d.evaluations.Add(1)
	now := d.opts.Clock.Now()
	d.mu.RLock()
	ps := make([]*policyState, 0, len(d.policies))
	for _, p := range d.policies {
		ps = append(ps, p)
	}
	d.mu.RUnlock()
	for _, p := range ps {
		p.mu.Lock()
		p.sk.Advance(now)
		items := p.sk.Top(p.sk.Capacity())
		th, k, interval, window, st := p.th, p.k, p.interval, p.window, p.last
		d.metrics.sketchBytes.WithLabelValues(p.id).Set(float64(p.sk.Bytes()))
		d.metrics.sketchKeys.WithLabelValues(p.id).Set(float64(p.sk.Len()))
		p.mu.Unlock()

		cands := report.Candidates(items, k, th)
		if report.Decide(now, st, cands, interval) == report.Skip {
			continue
		}
		rep := &v1alpha1.HotKeyReport{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: p.namespace,
				Name:      report.Name(p.name, d.opts.NodeName),
				Labels:    map[string]string{v1alpha1.LabelPolicy: p.name, v1alpha1.LabelNode: d.opts.NodeName},
			},
			Spec: v1alpha1.HotKeyReportSpec{
				NodeName:    d.opts.NodeName,
				PolicyName:  p.name,
				Window:      metav1.Duration{Duration: window},
				GeneratedAt: metav1.NewTime(now),
				Candidates:  cands,
			},
		}
		p.mu.Lock()
		removed := p.removed
		p.mu.Unlock()
		if removed {
			continue
		}
		if err := d.writeReport(ctx, rep); err != nil {
			d.metrics.reportWrites.WithLabelValues("error").Inc()
			d.log.Error(err, "writing report", "policy", p.id)
			continue
		}
		d.metrics.reportWrites.WithLabelValues("written").Inc()
		p.mu.Lock()
		p.last = report.State{Written: true, At: now, Candidates: cands}
		p.mu.Unlock()
	}
}

// writeReport creates the report or replaces its labels and spec with a
// merge patch, which needs no resourceVersion: the detector is the report's
// only writer.
func (d *Detector) writeReport(ctx context.Context, rep *v1alpha1.HotKeyReport) error {
	cands := rep.Spec.Candidates
	if cands == nil {
		cands = []v1alpha1.Candidate{} // "[]", not omitted: the patch must clear the list
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": rep.Labels},
		"spec": map[string]any{
			"nodeName":    rep.Spec.NodeName,
			"policyName":  rep.Spec.PolicyName,
			"window":      rep.Spec.Window,
			"generatedAt": rep.Spec.GeneratedAt,
			"candidates":  cands,
		},
	})
	if err != nil {
		return err
	}
	existing := rep.DeepCopy()
	err = d.client.Patch(ctx, existing, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		err = d.client.Create(ctx, rep.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			err = d.client.Patch(ctx, existing, client.RawPatch(types.MergePatchType, patch))
		}
	}
	if err != nil {
		return fmt.Errorf("report %s/%s: %w", rep.Namespace, rep.Name, err)
	}
	return nil
}

// deleteReports deletes this node's reports for a policy that went away.
func (d *Detector) deleteReports(ctx context.Context, namespace, policy string) error {
	var list v1alpha1.HotKeyReportList
	if err := d.client.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{v1alpha1.LabelPolicy: policy, v1alpha1.LabelNode: d.opts.NodeName}); err != nil {
		return err
	}
	for i := range list.Items {
		if err := d.client.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
			d.metrics.reportWrites.WithLabelValues("error").Inc()
			return err
		}
		d.metrics.reportWrites.WithLabelValues("deleted").Inc()
	}
	return nil
}
