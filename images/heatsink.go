package images

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Heatsink is what the heatsink image is made of.
type Heatsink struct {
	// Binary is the static heatsink binary (CGO_ENABLED=0), stamped with
	// Version.
	Binary []byte
	// Version is the release (the chart's appVersion unless told), Revision
	// the git commit it was built from, Source the repository's URL.
	Version, Revision, Source string
	// Arch is the binary's architecture (GOARCH; "amd64" when empty).
	Arch string
}

// Labels are the image's OCI annotations as config labels.
func (h Heatsink) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "heatsink",
		"org.opencontainers.image.description": "heatsink: manager, node agent and sidecar (subcommands of one binary)",
		"org.opencontainers.image.version":     h.Version,
		"org.opencontainers.image.revision":    h.Revision,
		"org.opencontainers.image.source":      h.Source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.base.digest": BaseDigest,
	}
}

// BuildHeatsink makes the heatsink image: the base plus /heatsink, run as
// nonroot with `heatsink` as the entrypoint (the chart and the injector pass
// the subcommand as args).
func BuildHeatsink(base v1.Image, h Heatsink) (v1.Image, error) {
	if len(h.Binary) == 0 || h.Version == "" {
		return nil, fmt.Errorf("heatsink image: a binary and a version are needed")
	}
	return Build(base, []File{{Path: "/heatsink", Mode: 0o555, Data: h.Binary}}, Config{
		Entrypoint: []string{"/heatsink"},
		Labels:     h.Labels(),
		History:    "COPY heatsink /heatsink",
		Arch:       h.Arch,
	})
}

// App makes an image of one static binary at /app, run as nonroot (the
// pause image and the end-to-end test's workload).
func App(base v1.Image, binary []byte, title string, args ...string) (v1.Image, error) {
	return Build(base, []File{{Path: "/app", Mode: 0o555, Data: binary}}, Config{
		Entrypoint: []string{"/app"},
		Cmd:        args,
		Labels:     map[string]string{"org.opencontainers.image.title": title},
		History:    "COPY " + title + " /app",
	})
}

// HostFiles copies programs installed on this machine, with every shared
// library they load (as ldd lists them), into files for a layer: how the
// end-to-end test's Redis image is made from Debian's redis-server and
// redis-tools without a Debian base image.
func HostFiles(programs ...string) ([]File, error) {
	seen := map[string]bool{}
	var files []File
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		st, err := os.Stat(real)
		if err != nil {
			return err
		}
		files = append(files, File{Path: p, Mode: int64(st.Mode().Perm()), Data: b})
		return nil
	}
	for _, prog := range programs {
		if err := add(prog); err != nil {
			return nil, err
		}
		libs, err := ldd(prog)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			if err := add(l); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// ldd lists the absolute paths of the libraries prog loads.
func ldd(prog string) ([]string, error) {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", prog, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"
		f := strings.Fields(sc.Text())
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, w)
			}
		}
	}
	return libs, nil
}

// WriteTarball writes img as a `docker save` tarball tagged ref, which
// `ctr images import` and `docker load` read.
func WriteTarball(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(file, tag, img)
}

// ReadTarball reads the image tagged ref from a tarball WriteTarball wrote.
func ReadTarball(file, ref string) (v1.Image, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return nil, err
	}
	return tarball.ImageFromPath(file, &tag)
}
