package version

import (
	"regexp"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// releaseLine reads MAJOR.MINOR from a version ("0.1.0", "v1.2.3-rc.1").
var releaseLine = regexp.MustCompile(`^v?([0-9]+)\.([0-9]+)\.[0-9]+`)

// ReleaseLine is the number of the release line of version v, MAJOR*1000 +
// MINOR ("0.1.0" is 1, "1.2.3" is 1002), or -1 for a build of no release
// ("dev", a git description). The version skew policy (docs/install.md)
// is stated in release lines: the manager at N runs with node agents and
// sidecars at N-1 and N. PromQL cannot compare version strings; the alert
// HeatsinkVersionSkew compares these numbers.
func ReleaseLine(v string) int {
	m := releaseLine.FindStringSubmatch(v)
	if m == nil {
		return -1
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if minor >= 1000 {
		return -1
	}
	return major*1000 + minor
}

// Collectors are the build information metrics of one component
// ("manager", "node-agent", "sidecar"): heatsink_build_info{component,
// version, revision, goversion} 1, and heatsink_build_release_line{component}
// (ReleaseLine of the version; -1 for an unreleased build).
func Collectors(component string) []prometheus.Collector {
	i := Get()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "heatsink_build_info",
		Help:        "1, labelled with the running binary's version, git revision and Go version: which version each manager, node agent and sidecar runs.",
		ConstLabels: prometheus.Labels{"component": component, "version": i.Version, "revision": i.Revision, "goversion": i.Go},
	})
	info.Set(1)
	line := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "heatsink_build_release_line",
		Help:        "The running binary's release line, MAJOR*1000+MINOR (-1: not a release build); HeatsinkVersionSkew compares node agents' and sidecars' with the manager's.",
		ConstLabels: prometheus.Labels{"component": component},
	})
	line.Set(float64(ReleaseLine(i.Version)))
	return []prometheus.Collector{info, line}
}
