package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReleaseLine(t *testing.T) {
	for v, want := range map[string]int{"0.1.0": 1, "v0.1.0": 1, "1.2.3": 1002, "v2.0.0-rc.1": 2000, "dev": -1, "4905477": -1, "v0.0.0-4905477": 0, "0.1000.0": -1} {
		if got := ReleaseLine(v); got != want {
			t.Errorf("ReleaseLine(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestCollectorsSayTheVersion(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "0.3.1"
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors("sidecar")...)
	const want = `
# HELP heatsink_build_release_line The running binary's release line, MAJOR*1000+MINOR (-1: not a release build); HeatsinkVersionSkew compares node agents' and sidecars' with the manager's.
# TYPE heatsink_build_release_line gauge
heatsink_build_release_line{component="sidecar"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "heatsink_build_release_line"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "heatsink_build_info" {
			continue
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			found = found || (l.GetName() == "version" && l.GetValue() == "0.3.1")
		}
	}
	if !found {
		t.Error("heatsink_build_info has no version=\"0.3.1\" label")
	}
}
