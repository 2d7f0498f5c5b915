package controllers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// TestCapturePodsFeed: with CapturePods, a real manager against a real API
// server tells a node's agent (its watch stream) about the pods without
// the sidecar of a policy's namespace, marked uninjected, and a policy's
// directive carries its Redis addresses and database for the capture. An
// injected pod stays injected; a pod of a namespace without a policy is
// not listed.
func TestCapturePodsFeed(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	for _, ns := range []string{"shop", "other"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	addr := startCaptureManager(t, cp, 0)

	pol := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}
	pol.Spec.Target.Addresses = []string{"redis.shop.svc:6379"}
	pol.Spec.Target.Database = 2
	v1alpha1.SetDefaults(&pol.Spec)
	if err := cp.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	runningPod(t, cp, "shop", "plain", "10.7.0.1", nil)
	runningPod(t, cp, "shop", "injected", "10.7.0.2", map[string]string{v1alpha1.LabelPolicy: "checkout"})
	runningPod(t, cp, "other", "plain", "10.7.0.3", nil)

	// The node agent's side of the link: read events until the node's pods
	// are as expected and the directive carries the endpoints.
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	for {
		if wctx.Err() != nil {
			t.Fatal("the node's stream never listed the pods as expected")
		}
		ok := func() bool {
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, "http://"+addr+agentlink.PathWatch+"?node=node-a", nil)
			agentlink.SetToken(req, "feed")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				return false
			}
			defer resp.Body.Close()
			dec := json.NewDecoder(resp.Body)
			var pods []agentlink.Pod
			var dir *agentlink.Directive
			for {
				ev, err := agentlink.DecodeEvent(dec)
				if err != nil {
					return false
				}
				switch ev.Type {
				case agentlink.TypePods:
					pods = ev.Pods
				case agentlink.TypePolicy:
					dir = ev.Directive
				case agentlink.TypeSynced, agentlink.TypeHeartbeat:
					got := map[string]agentlink.Pod{}
					for _, p := range pods {
						got[p.IP] = p
					}
					plain, injected := got["10.7.0.1"], got["10.7.0.2"]
					_, other := got["10.7.0.3"]
					if len(got) == 2 && plain.Uninjected && plain.Policy == "shop/checkout" && !injected.Uninjected && !other &&
						dir != nil && len(dir.Endpoints) == 1 && dir.Endpoints[0] == "redis.shop.svc:6379" && dir.Database == 2 {
						return true
					}
					if ev.Type == agentlink.TypeSynced {
						continue
					}
					return false // a heartbeat: nothing new came; reconnect for a fresh snapshot
				}
			}
		}()
		if ok {
			return
		}
	}
}
