// Package version is heatsink's version. `make image` stamps it with
//
//	-ldflags "-X github.com/heatsink-dev/heatsink/internal/version.Version=<v>"
//
// so that the binary in an image says which release it is; a plain
// `go build` says "dev".
package version

// Version is the release this binary was built as.
var Version = "dev"
