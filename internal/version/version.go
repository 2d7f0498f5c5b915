// Package version is the version of the heatsink binary. Release builds stamp
// it with the linker:
//
//	go build -ldflags "-X github.com/heatsink-dev/heatsink/internal/version.Version=v0.1.0" ./cmd/heatsink
//
// (make build does, from git describe). An unstamped build reports the module
// version and VCS revision Go recorded, or "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, set with -ldflags -X; empty when unstamped.
var Version string

// Info is what `heatsink version` prints.
type Info struct {
	Version  string
	Revision string
	Modified bool
	Go       string
}

// Get returns the version of the running binary.
func Get() Info {
	info := Info{Version: Version, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

func (i Info) String() string {
	s := "heatsink " + i.Version
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if i.Modified {
			rev += "-dirty"
		}
		s += fmt.Sprintf(" (%s)", rev)
	}
	return s + " " + i.Go
}
