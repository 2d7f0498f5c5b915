package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// kstatusIs returns a condition for f.eventually: the policy, read from the
// API server as any tool reads it, has the kstatus status want, computed by
// the kstatus library itself (what Flux's health checks and cli-utils'
// waiters run), not by a copy of its rules.
func kstatusIs(f *flow, policy string, want status.Status) func() error {
	return func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("HotKeyPolicy"))
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: policy}, u); err != nil {
			return err
		}
		res, err := status.Compute(u)
		if err != nil {
			return err
		}
		if res.Status != want {
			return fmt.Errorf("kstatus %s (%s), want %s", res.Status, res.Message, want)
		}
		return nil
	}
}
