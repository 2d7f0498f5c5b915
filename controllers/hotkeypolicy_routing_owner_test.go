package controllers

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// ownershipFlows: a ConfigMap named <policy>-routing that heatsink did not
// create for the policy is never taken over, written or deleted; the
// policy says so in Ready, and publishes once the name is free.
func ownershipFlows(t *testing.T, env *flowEnv) {
	t.Run("a routing ConfigMap heatsink did not create is not adopted", func(t *testing.T) {
		f := env.newFlow(t)
		foreign := &corev1.ConfigMap{Data: map[string]string{"owner": "someone else"}}
		foreign.Namespace, foreign.Name = f.ns, routing.ConfigMapName("adopt")
		if err := f.c.Create(f.ctx, foreign); err != nil {
			t.Fatal(err)
		}
		f.policy("adopt", env.withRedis)
		f.eventually("Ready False, RoutingConfigMapNotOwned", func() error {
			c := meta.FindStatusCondition(f.status("adopt").Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != "False" || c.Reason != ReasonRoutingNotOwned {
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
		got := &corev1.ConfigMap{}
		if err := f.c.Get(f.ctx, client.ObjectKeyFromObject(foreign), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Data) != 1 || got.Data["owner"] != "someone else" || len(got.Labels) != 0 || len(got.OwnerReferences) != 0 || len(got.Finalizers) != 0 {
			t.Fatalf("the foreign ConfigMap was written: labels %v, owners %v, finalizers %v, data keys %d", got.Labels, got.OwnerReferences, got.Finalizers, len(got.Data))
		}
		// Freed, the name is the policy's.
		if err := f.c.Delete(f.ctx, got); err != nil {
			t.Fatal(err)
		}
		f.eventually("published once the name is free", func() error {
			_, cm, err := f.table("adopt")
			if err != nil {
				return err
			}
			if ref := cm.OwnerReferences; len(ref) != 1 || ref[0].Name != "adopt" {
				return fmt.Errorf("owners %+v", ref)
			}
			return nil
		})
	})
}
