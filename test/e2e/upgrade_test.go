//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// previousInstaller installs the previous release (release.yaml's
// previous.commit: its chart, and its image hack/e2e.sh built from a git
// worktree of that commit) and upgrades it to this one as docs/install.md
// says: this chart's CRDs applied first (Helm never upgrades crds/), then
// helm upgrade to this chart, whose default image is this release's. The
// scenario runs traffic across the upgrade: the sidecars injected before it
// keep the previous release's sidecar, so the upgrade also runs previous
// sidecars against this manager and node agent (the skew policy's N-1),
// with the table kept, no client error and the counter exact.
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
	run(t, nil, p.e.Helm, "upgrade", "heatsink", this, "--namespace", systemNamespace, "--reset-then-reuse-values",
		"--set", "image.tag=", "--wait", "--timeout", "5m")
}

func (p previousInstaller) uninstall(t *testing.T) { helmInstaller{p.e}.uninstall(t) }
