//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/demo/observe"
	"github.com/heatsink-dev/heatsink/internal/release"
	"github.com/heatsink-dev/heatsink/webhook"
)

// previousInstaller installs the previous release (release.yaml's
// previous.commit: its chart, and its image hack/e2e.sh built from a git
// worktree of that commit) and upgrades it to this one as docs/install.md
// says: this chart's CRDs applied first (Helm never upgrades crds/), then
// helm upgrade to this chart, whose default image is this release's. The
// scenario runs traffic across the upgrade: the sidecars injected before it
// keep the previous release's sidecar, so the upgrade also runs previous
// sidecars against this manager and node agent (the skew policy's N-1),
// with the table kept, no client error and the counter exact; then it rolls
// the workload (rollWorkload) and the new pods, on this release's sidecar,
// keep the keys routed with no error, the counter exact across both.
type previousInstaller struct {
	e env
	// chart is the previous commit's charts/heatsink, image its image.
	chart, repository, tag string
}

// previousRelease is the previous release when hack/e2e.sh built it
// (E2E_PREVIOUS_CHART, E2E_PREVIOUS_IMAGE_TAG), else ok is false.
func previousRelease(e env) (previousInstaller, bool) {
	chart, tag := os.Getenv("E2E_PREVIOUS_CHART"), os.Getenv("E2E_PREVIOUS_IMAGE_TAG")
	if chart == "" || tag == "" {
		return previousInstaller{}, false
	}
	return previousInstaller{e: e, chart: chart, repository: "ghcr.io/heatsink-dev/heatsink", tag: tag}, true
}

func (p previousInstaller) name() string { return "upgrade-from-previous" }

// policy is the policy in the previous release's form: it names its Redis by
// address (the previous release has no ClusterRedisTarget).
func (p previousInstaller) policy() string {
	return strings.Replace(strings.TrimPrefix(policyYAML, targetYAML+"---\n"),
		"    clusterTargetRef: {name: redis-cluster}\n",
		"    addresses: [\"redis.redis.svc.cluster.local:6379\"]\n    cluster: true\n", 1)
}

// sidecarVersion is this release's image tag: the sidecar every pod injected
// after the upgrade runs.
func (p previousInstaller) sidecarVersion() string {
	f, err := release.Load(p.e.Root)
	if err != nil {
		panic(err)
	}
	return f.ImageTag()
}

func (p previousInstaller) install(t *testing.T) {
	run(t, nil, p.e.Helm, "install", "heatsink", p.chart, "--namespace", systemNamespace, "--create-namespace",
		"--set", "image.repository="+p.repository, "--set", "image.tag="+p.tag, "--wait", "--timeout", "5m")
}

func (p previousInstaller) upgrade(t *testing.T) {
	this := filepath.Join(p.e.Root, "charts", "heatsink")
	kubectl(t, nil, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(this, "crds"))
	// --reset-then-reuse-values keeps what the user set and takes this
	// chart's defaults for the rest: the image tag set at install is the
	// user's choice, so it is reset to this release's (the appVersion).
	// Its policy names Redis by address, which this release refuses unless
	// the installer allows it: docs/install.md's upgrade note keeps the
	// earlier behaviour with targets.allowRawAddresses.
	run(t, nil, p.e.Helm, "upgrade", "heatsink", this, "--namespace", systemNamespace, "--reset-then-reuse-values",
		"--set", "image.tag=", "--set", "targets.allowRawAddresses=true", "--wait", "--timeout", "5m")
}

func (p previousInstaller) uninstall(t *testing.T) { helmInstaller{p.e}.uninstall(t) }

// rollWorkload rolls the application after an upgrade that changed the
// sidecar, as docs/install.md says: the pods injected before it (the previous
// release's sidecar) stop their traffic and report what was acknowledged,
// `kubectl rollout restart` replaces them, and the new pods, which must carry
// this release's sidecar, send the viral keys again through the routing
// table the upgraded manager kept. It returns the new pods and the INCRs the
// old ones had acknowledged.
func rollWorkload(t *testing.T, c client.Client, obs *observe.Observer, smp *observe.Sampler, version string,
	old []corev1.Pod, name string, rep *report) ([]corev1.Pod, int64) {
	var acked int64
	rep.step(t, name+": previous sidecars' traffic stopped", func() {
		for _, p := range old {
			s := post(t, p.Status.PodIP, "/stop")
			acked += s.IncrAcked
			if s.IncrErrors > 0 || s.GetErrors > 0 || s.ViralGetErrors > 0 {
				t.Errorf("pod %s (previous sidecar): errors: %+v", p.Name, s)
			}
		}
	})
	rep.step(t, name+": workload rolled (kubectl rollout restart)", func() {
		kubectl(t, nil, "-n", appNamespace, "rollout", "restart", "deployment/app")
		kubectl(t, nil, "-n", appNamespace, "rollout", "status", "deployment/app", "--timeout=300s")
	})
	pods := appPods(t, c)
	for _, p := range pods {
		checkSidecar(t, p)
		if got := p.Labels[webhook.SidecarVersionLabel]; got != version {
			t.Errorf("rolled pod %s: %s=%q, want this release's %q", p.Name, webhook.SidecarVersionLabel, got, version)
		}
	}
	for _, p := range pods {
		post(t, p.Status.PodIP, "/viral")
	}
	waitSamples(t, smp, 10)
	snap := obs.Snapshot()
	if lost := lostKeys(snap); len(lost) > 0 {
		t.Errorf("the routing table lost %v while the workload rolled", lost)
	}
	for _, k := range []string{"product:viral", "likes:viral"} {
		if snap.Table == nil || snap.Table.Lookup(k) == nil {
			t.Errorf("after the roll the routing table has no entry for %s", k)
		}
	}
	errs := workloadErrors(t, pods)
	if errs != 0 {
		t.Errorf("rolled pods: %d client errors", errs)
	}
	rep.add("| %s: roll: previous sidecars' acknowledged INCRs / new pods' client errors | %d / %d |", name, acked, errs)
	return pods, acked
}
