// Package release tests the release as a user receives it: assembled as
// make release does (internal/release), published to an OCI registry
// (go-containerregistry's, in this process, on 127.0.0.1), and read back
// from there with the tools a user has: helm install oci:// against a real
// API server, the image index of both architectures, the cosign signature
// checked with the public key, the SBOM and the provenance.
package release

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/heatsink-dev/heatsink/images"
	"github.com/heatsink-dev/heatsink/internal/release"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// goBuild cross-compiles heatsink for linux/arch with the flags of make
// release, into dir: after a make release (or a first run) the Go build
// cache holds every package, and only the links run.
func goBuild(t *testing.T, dir, arch, version string) []byte {
	t.Helper()
	out := filepath.Join(dir, "heatsink-linux-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/heatsink-dev/heatsink/internal/version.Version="+version,
		"-o", out, "github.com/heatsink-dev/heatsink/cmd/heatsink")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build linux/%s: %v\n%s", arch, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func signingKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), err, errb.String(), out.String())
	}
	return out.String()
}

func helmBin(t *testing.T, root string) string {
	t.Helper()
	h := os.Getenv("HELM_BIN")
	if h == "" {
		m, _ := filepath.Glob(filepath.Join(root, "bin", "helm-v*"))
		sort.Strings(m)
		if len(m) > 0 {
			h = m[len(m)-1]
		}
	}
	if _, err := os.Stat(h); h == "" || err != nil {
		t.Fatalf("helm not found (HELM_BIN=%q): run make helm", h)
	}
	return h
}

// TestReleaseRoundTripThroughARegistry assembles the release of
// release.yaml, publishes it to an in-process registry and checks every
// artefact from there.
func TestReleaseRoundTripThroughARegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles heatsink and runs helm and an API server")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBin(t, root)
	f, err := release.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	tag := f.ImageTag()
	work := t.TempDir()

	// What make release does, with the linux binaries only (the darwin
	// CLI builds are make release's alone: they add minutes, not checks).
	bins := map[string][]byte{}
	for _, p := range images.Platforms {
		bins[p.Architecture] = goBuild(t, work, p.Architecture, tag)
	}
	run(t, helm, "package", filepath.Join(root, "charts/heatsink"), "-d", work)
	chart, err := os.ReadFile(filepath.Join(work, "heatsink-"+tag+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := release.LoadSigner(signingKey(t))
	if err != nil {
		t.Fatal(err)
	}
	base, err := images.LoadBase(filepath.Join(root, "images/base"))
	if err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	reg := host + "/heatsink-dev"
	a, err := release.Images(release.Inputs{Version: f.Version, Revision: strings.Repeat("ab", 20), Registry: reg, Binaries: bins,
		Base: base, Chart: chart, Signer: signer, GoVersion: "test", Builder: t.Name()}, filepath.Join(work, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Publish(filepath.Join(work, "oci"), "elsewhere.example/x"); err == nil {
		t.Error("publishing to another registry than the signatures name: want an error")
	}
	pushed, err := release.Publish(filepath.Join(work, "oci"), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d manifests", len(pushed))

	repo, err := name.NewRepository(reg + "/heatsink")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("index of both architectures", func(t *testing.T) { checkIndex(t, repo, tag, a) })
	t.Run("signatures", func(t *testing.T) { checkSignatures(t, repo, signer.PublicKeyPEM(), a) })
	t.Run("sbom", func(t *testing.T) { checkSBOMs(t, repo, base, a) })
	t.Run("provenance", func(t *testing.T) { checkProvenance(t, repo, signer.PublicKeyPEM(), tag, a) })
	t.Run("helm install oci", func(t *testing.T) { helmInstall(t, helm, reg, tag) })
}

func pull(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return img
}

// checkIndex pulls the tag: an OCI index of linux/amd64 and linux/arm64,
// each image's /heatsink an ELF binary of its architecture.
func checkIndex(t *testing.T, repo name.Repository, tag string, a *release.Artefacts) {
	idx, err := remote.Index(repo.Tag(tag))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != a.Index {
		t.Errorf("the tag is %s, the release's index %s", d, a.Index)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var got []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		got = append(got, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.OS != "linux" || cf.Config.Labels["org.opencontainers.image.version"] != tag {
			t.Errorf("%s: config says %s/%s, version %q", m.Platform, cf.OS, cf.Architecture, cf.Config.Labels["org.opencontainers.image.version"])
		}
		bin := fileIn(t, img, "heatsink")
		e, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: /heatsink: %v", m.Platform, err)
		}
		if e.Machine != machines[m.Platform.Architecture] {
			t.Errorf("%s: /heatsink is for %s", m.Platform, e.Machine)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", got)
	}
}

// fileIn reads a file of img's flattened file system.
func fileIn(t *testing.T, img v1.Image, p string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	b, err := readTar(rc, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkSignatures(t *testing.T, repo name.Repository, pub []byte, a *release.Artefacts) {
	v, err := release.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	other, err := release.LoadSigner(signingKey(t))
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := release.LoadVerifier(other.PublicKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	digests := []v1.Hash{a.Index, a.Platforms["amd64"], a.Platforms["arm64"]}
	for _, d := range digests {
		sig := pull(t, repo.Tag(release.AttachedTag(d, release.SignatureTagSuffix)).Name())
		if err := v.VerifySignature(sig, repo.Name(), d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
		if err := wrongKey.VerifySignature(sig, repo.Name(), d); err == nil {
			t.Errorf("%s: another key verifies the signature", d)
		}
	}
	// A signature is of its digest only.
	sig := pull(t, repo.Tag(release.AttachedTag(a.Index, release.SignatureTagSuffix)).Name())
	if err := v.VerifySignature(sig, repo.Name(), a.Platforms["amd64"]); err == nil {
		t.Error("the index's signature verifies for another digest")
	}
}

func checkSBOMs(t *testing.T, repo name.Repository, base v1.Image, a *release.Artefacts) {
	_, pkgs, err := images.InstalledPackages(base)
	if err != nil {
		t.Fatal(err)
	}
	for arch, d := range a.Platforms {
		att := pull(t, repo.Tag(release.AttachedTag(d, release.SBOMTagSuffix)).Name())
		layers, err := att.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", arch, len(layers), err)
		}
		if mt, _ := layers[0].MediaType(); mt != release.SBOMMediaType {
			t.Errorf("%s: SBOM media type %s", arch, mt)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(rc)
		rc.Close()
		bom, err := release.ReadSBOM(b.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		purls := map[string]bool{}
		for _, c := range *bom.Components {
			purls[c.PackageURL] = true
		}
		// The Go modules of the binary in the image, as Go itself lists them.
		img := pull(t, repo.Digest(d.String()).Name())
		exe := filepath.Join(t.TempDir(), "heatsink")
		if err := os.WriteFile(exe, fileIn(t, img, "heatsink"), 0o755); err != nil {
			t.Fatal(err)
		}
		mods := 0
		for _, line := range strings.Split(run(t, "go", "version", "-m", exe), "\n") {
			fl := strings.Fields(line)
			if len(fl) >= 3 && fl[0] == "dep" {
				mods++
				if want := "pkg:golang/" + fl[1] + "@" + fl[2]; !purls[want] {
					t.Errorf("%s: SBOM lacks %s", arch, want)
				}
			}
		}
		if mods < 20 {
			t.Errorf("%s: go version -m lists %d modules", arch, mods)
		}
		for _, must := range []string{"pkg:golang/github.com/redis/go-redis/v9@", "pkg:golang/k8s.io/client-go@"} {
			found := false
			for p := range purls {
				found = found || strings.HasPrefix(p, must)
			}
			if !found {
				t.Errorf("%s: SBOM has no %s", arch, must)
			}
		}
		for _, p := range pkgs {
			want := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=all&distro=debian-12", p.Name, p.Version)
			if !purls[want] {
				t.Errorf("%s: SBOM lacks the base's package %s (%s)", arch, p.Name, want)
			}
		}
		if len(pkgs) != 2 {
			t.Errorf("the base records %d packages, want ca-certificates and tzdata", len(pkgs))
		}
	}
}

func checkProvenance(t *testing.T, repo name.Repository, pub []byte, tag string, a *release.Artefacts) {
	v, err := release.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	att := pull(t, repo.Tag(release.AttachedTag(a.Index, release.AttestationTagSuffix)).Name())
	stmt, err := v.VerifyAttestation(att)
	if err != nil {
		t.Fatal(err)
	}
	var st release.Statement
	if err := json.Unmarshal(stmt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != release.StatementType || st.PredicateType != release.ProvenancePredicate {
		t.Errorf("statement %s / %s", st.Type, st.PredicateType)
	}
	subjects := map[string]string{}
	for _, s := range st.Subject {
		subjects[s.Name] = s.Digest["sha256"]
	}
	if subjects[repo.Tag(tag).Name()] != a.Index.Hex || subjects[repo.Name()+"@linux/arm64"] != a.Platforms["arm64"].Hex {
		t.Errorf("subjects %v do not name the index %s and the arm64 image", subjects, a.Index)
	}
}

// helmInstall installs the chart from the registry, as the docs say, into a
// real API server, with the image of the same registry.
func helmInstall(t *testing.T, helm, reg, tag string) {
	cp := testenv.Start(t, controlplane.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	env := []string{"HELM_CACHE_HOME=" + cache, "HELM_CONFIG_HOME=" + cache, "HELM_DATA_HOME=" + cache}
	cmd := exec.Command(helm, "install", "heatsink", "oci://"+reg+"/charts/heatsink", "--version", tag, "--plain-http",
		"--kubeconfig", kubeconfig, "--namespace", "heatsink-system", "--create-namespace", "--set", "image.repository="+reg+"/heatsink")
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install oci://: %v\n%s", err, out)
	}
	out := run(t, helm, "list", "--kubeconfig", kubeconfig, "-n", "heatsink-system", "-o", "json")
	if !strings.Contains(out, `"chart":"heatsink-`+tag+`"`) || !strings.Contains(out, `"status":"deployed"`) {
		t.Errorf("helm list: %s", out)
	}
	deploy := run(t, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "--kubeconfig", kubeconfig, "-n", "heatsink-system",
		"get", "deployments,daemonsets", "-o", "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}{\"\\n\"}{end}")
	lines := strings.Fields(deploy)
	if len(lines) < 2 {
		t.Fatalf("deployments and daemonsets run %q", deploy)
	}
	for _, img := range lines {
		if img != reg+"/heatsink:"+tag {
			t.Errorf("a workload runs %s, want %s/heatsink:%s (the published index)", img, reg, tag)
		}
	}
}
