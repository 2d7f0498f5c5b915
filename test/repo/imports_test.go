package repo

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTheSidecarImportsDataplane checks that the node agent, the
// injector and the contract packages link nothing of the data plane's
// folder: they run in other processes (the node agent's DaemonSet, the
// manager) or are shared by both sides of a link, so what they need of the
// sidecar's knowledge (the Redis command table, the env names) lives in a
// contract package both sides import (routing/command, injectlink), and a
// change inside dataplane/ cannot change them unseen.
func TestOnlyTheSidecarImportsDataplane(t *testing.T) {
	r := root(t)
	for _, pkg := range []string{"./nodeagent/...", "./webhook/...", "./agentlink/...", "./sidecarlink/...", "./routing/...", "./injectlink/..."} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = r
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/heatsink-dev/heatsink/dataplane/") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
