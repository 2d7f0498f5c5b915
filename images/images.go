// Package images builds heatsink's OCI image, and the images its end-to-end
// test runs, without a Docker engine: go-containerregistry assembles layers
// and configs in memory and writes tarballs that containerd's own tooling
// (`ctr images import`) and every registry client accept.
//
// Every image starts from one base, committed in base/ as an OCI image
// layout and pinned by BaseDigest: CA certificates and time zone data taken
// from Debian's packages, /etc/passwd with the nonroot user (65532), /tmp.
// Why not distroless/static: no registry is reachable where heatsink is
// built and tested, and a base that the build cannot pull cannot be pinned.
// Assembling the same content from Debian's packages gives a base whose
// every byte is in the repository: the digest pins it exactly, the build
// needs no network, and `heatsink-image base` re-creates it (and prints the
// new digest to pin) when Debian ships new certificates or zones.
//
// Layers are reproducible: entries sorted, owned by root unless told, and
// dated at the Unix epoch, so the same files always give the same digest.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group every image runs as unless told: numeric,
// so that the kubelet can verify runAsNonRoot.
const NonRoot = 65532

// File is one entry of a layer. Exactly one of Data (a regular file), Link
// (a symbolic link) or Dir is meaningful.
type File struct {
	Path string
	Mode int64
	Data []byte
	Link string
	Dir  bool
	// UID and GID own the entry (0: root).
	UID, GID int
}

// epoch is every entry's and every image's date: reproducible digests.
var epoch = time.Unix(0, 0).UTC()

// Layer makes a gzip-compressed OCI layer of files. Parent directories
// that files do not list are added (0755, root). Paths are absolute.
func Layer(files []File) (v1.Layer, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			continue
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("layer: %s listed twice", p)
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Config is what an image built on the base runs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User is "uid:gid", numeric; empty means NonRoot:NonRoot.
	User       string
	WorkingDir string
	Labels     map[string]string
	// History is the description of the added layer.
	History string
	// Arch is the image's linux architecture ("amd64" when empty): the
	// base is architecture-independent, so only the added files and this
	// field differ between the platforms of one release.
	Arch string
}

// Platforms are the platforms a release's image index holds.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Build is base plus one layer of files, run as cfg says, for linux/cfg.Arch.
func Build(base v1.Image, files []File, cfg Config) (v1.Image, error) {
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: cfg.History, Comment: "heatsink-image"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = cfg.Arch, "linux"
	if cf.Architecture == "" {
		cf.Architecture = "amd64"
	}
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.WorkingDir = cfg.Entrypoint, cfg.Cmd, cfg.WorkingDir
	cf.Config.User = cfg.User
	if cf.Config.User == "" {
		cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	}
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CABundle}, cfg.Env...)
	labels := map[string]string{}
	for k, v := range cf.Config.Labels {
		labels[k] = v
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	cf.Config.Labels = labels
	return mutate.ConfigFile(img, cf)
}

// fromScratch is an empty OCI image (OCI media types, not Docker's).
func fromScratch() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}
