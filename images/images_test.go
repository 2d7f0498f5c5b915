package images_test

import (
	"archive/tar"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/heatsink-dev/heatsink/images"
)

// entry is one file of an image's flattened file system.
type entry struct {
	mode     int64
	uid, gid int
	link     string
	data     []byte
}

// filesystem flattens img's layers.
func filesystem(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = entry{mode: h.Mode, uid: h.Uid, gid: h.Gid, link: h.Linkname, data: b}
	}
}

func TestLayerIsReproducible(t *testing.T) {
	files := []images.File{
		{Path: "/b/x", Data: []byte("x")},
		{Path: "/a", Data: []byte("a"), Mode: 0o600},
		{Path: "/b/l", Link: "x"},
	}
	digest := func(fs []images.File) v1.Hash {
		l, err := images.Layer(fs)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	reversed := []images.File{files[2], files[1], files[0]}
	if a, b := digest(files), digest(reversed); a != b {
		t.Errorf("the same files in another order give another layer: %s, %s", a, b)
	}
	if _, err := images.Layer([]images.File{{Path: "/a"}, {Path: "a"}}); err == nil {
		t.Error("a path listed twice: want an error")
	}
}

// TestBaseIsPinned reads the committed base by its pinned digest and checks
// what every image relies on: certificates Go can parse, time zones, the
// nonroot user.
func TestBaseIsPinned(t *testing.T) {
	base, err := images.LoadBase("base")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := base.Digest(); d.String() != images.BaseDigest {
		t.Fatalf("base digest %s, pinned %s", d, images.BaseDigest)
	}
	fs := filesystem(t, base)
	bundle := fs[images.CABundle].data
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatalf("%s: no certificate", images.CABundle)
	}
	n := 0
	for rest := bundle; ; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", n, err)
		}
	}
	if n < 100 {
		t.Errorf("%d CA certificates, want Mozilla's (over 100)", n)
	}
	for _, zone := range []string{"/usr/share/zoneinfo/Europe/Berlin", "/usr/share/zoneinfo/UTC", "/usr/share/zoneinfo/America/New_York"} {
		if e, ok := fs[zone]; !ok || (len(e.data) == 0 && e.link == "") {
			t.Errorf("%s missing", zone)
		}
	}
	if !strings.Contains(string(fs["/etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user:\n%s", fs["/etc/passwd"].data)
	}
	if e := fs["/tmp"]; e.mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", e.mode)
	}
}

// checkHeatsink reads the image tagged ref back from a tarball and checks
// what the chart and the kubelet rely on.
func checkHeatsink(t *testing.T, tarball, ref, version, revision string) {
	t.Helper()
	img, err := images.ReadTarball(tarball, ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("image is not valid: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/heatsink"}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	// Numeric and not root: the kubelet can verify runAsNonRoot.
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":       "heatsink",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.source":      "https://github.com/heatsink-dev/heatsink",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.base.digest": images.BaseDigest,
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	// The base's layers, unchanged, under heatsink's one layer.
	base, err := images.LoadBase("base")
	if err != nil {
		t.Fatal(err)
	}
	baseLayers, _ := base.Layers()
	layers, _ := img.Layers()
	if len(layers) != len(baseLayers)+1 {
		t.Fatalf("%d layers, want the base's %d and one", len(layers), len(baseLayers))
	}
	for i := range baseLayers {
		want, _ := baseLayers[i].DiffID()
		got, _ := layers[i].DiffID()
		if want != got {
			t.Errorf("layer %d is %s, the base's is %s", i, got, want)
		}
	}
	fs := filesystem(t, img)
	bin := fs["/heatsink"]
	if bin.mode != 0o555 || bin.uid != 0 {
		t.Errorf("/heatsink mode %o uid %d, want 0555 owned by root (not writable by the nonroot user)", bin.mode, bin.uid)
	}
	// The binary in the image says the version the labels say.
	exe := filepath.Join(t.TempDir(), "heatsink")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").Output()
	if err != nil {
		t.Fatalf("heatsink version: %v", err)
	}
	// "heatsink <version> (<revision>) <go version>"
	if f := strings.Fields(string(out)); len(f) < 2 || f[0] != "heatsink" || f[1] != version {
		t.Errorf("heatsink version prints %q, the label says %q", strings.TrimSpace(string(out)), version)
	}
}

// TestHeatsinkImage builds the image as `make image` does, from a binary
// stamped with a version, writes it, and reads it back.
func TestHeatsinkImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the heatsink binary")
	}
	const version, revision = "9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	dir := t.TempDir()
	bin := filepath.Join(dir, "heatsink")
	build := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-s -w -X github.com/heatsink-dev/heatsink/internal/version.Version="+version,
		"-o", bin, "github.com/heatsink-dev/heatsink/cmd/heatsink")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	base, err := images.LoadBase("base")
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.BuildHeatsink(base, images.Heatsink{Binary: b, Version: version, Revision: revision, Source: "https://github.com/heatsink-dev/heatsink"})
	if err != nil {
		t.Fatal(err)
	}
	const ref = "ghcr.io/heatsink-dev/heatsink:" + version
	tarball := filepath.Join(dir, "heatsink.tar")
	if err := images.WriteTarball(tarball, ref, img); err != nil {
		t.Fatal(err)
	}
	checkHeatsink(t, tarball, ref, version, revision)
}

// TestBuiltImage checks the tarball `make image` wrote (HEATSINK_IMAGE_TAR,
// with HEATSINK_IMAGE_REF, HEATSINK_VERSION and HEATSINK_REVISION); `make
// image` runs it.
func TestBuiltImage(t *testing.T) {
	tarball := os.Getenv("HEATSINK_IMAGE_TAR")
	if tarball == "" {
		t.Skip("HEATSINK_IMAGE_TAR not set: run by make image")
	}
	checkHeatsink(t, tarball, os.Getenv("HEATSINK_IMAGE_REF"), os.Getenv("HEATSINK_VERSION"), os.Getenv("HEATSINK_REVISION"))
}

// TestBaseRecordsItsPackagesForScanners checks that the base says what a
// scanner needs to see its packages: /etc/os-release names Debian 12, and
// each package's dpkg status entry is one dpkg itself reads back (dpkg-query
// on a status file made of the entries) with the version of the base's
// label.
func TestBaseRecordsItsPackagesForScanners(t *testing.T) {
	base, err := images.LoadBase("base")
	if err != nil {
		t.Fatal(err)
	}
	osr, pkgs, err := images.InstalledPackages(base)
	if err != nil {
		t.Fatal(err)
	}
	if osr.ID != "debian" || osr.VersionID != "12" {
		t.Errorf("os-release: %+v, want debian 12", osr)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkgs {
		got = append(got, p.Name+"="+p.Version)
		if p.Architecture != "all" || p.Source == "" {
			t.Errorf("%s: architecture %q, source %q", p.Name, p.Architecture, p.Source)
		}
	}
	if want := cf.Config.Labels["dev.heatsink.base.debian-packages"]; strings.Join(got, " ") != want {
		t.Errorf("status entries list %q, the base's label %q", got, want)
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("dpkg-query not installed")
	}
	fs := filesystem(t, base)
	admin := t.TempDir()
	var status []byte
	for _, p := range pkgs {
		status = append(append(status, fs[images.DpkgStatusDir+"/"+p.Name].data...), '\n')
	}
	if err := os.WriteFile(filepath.Join(admin, "status"), status, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dpkg-query", "--admindir="+admin, "-W", "-f", "${Package}=${Version} ${db:Status-Abbrev}\n").CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-query: %v\n%s", err, out)
	}
	var read []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] != "ii" {
			t.Errorf("dpkg-query: %q is not an installed package", l)
			continue
		}
		read = append(read, f[0])
	}
	if diff := cmp.Diff(got, read); diff != "" {
		t.Errorf("dpkg reads other packages (-status.d +dpkg-query):\n%s", diff)
	}
}
