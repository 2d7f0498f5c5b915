// Command release assembles and publishes a heatsink release (make release,
// make publish; see docs/release.md):
//
//	release build   --version V --revision R --registry REG --key KEY --bin-dir DIR --chart TGZ --out DIR
//	release publish --from DIR/oci --registry REG
//
// build reads the binaries hack/release.sh cross-compiled (DIR/heatsink-OS-ARCH)
// and the chart helm packaged, and writes under --out: the OCI image layout
// (oci/: multi-arch index, signatures, SBOMs, provenance, chart), the SBOMs
// and provenance as files, cosign.pub, the CLI archives with checksums.txt,
// the krew manifest and the release notes. publish pushes oci/ to REG.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/heatsink-dev/heatsink/images"
	"github.com/heatsink-dev/heatsink/internal/release"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release <build|publish> [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "publish":
		err = publish(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	version := fs.String("version", "", "the release tag; must be release.yaml's")
	revision := fs.String("revision", "", "the git commit")
	registry := fs.String("registry", "ghcr.io/heatsink-dev", "where the release will be published (the signatures name it)")
	key := fs.String("key", "", "the ECDSA P-256 signing key (PEM, unencrypted)")
	binDir := fs.String("bin-dir", "", "the cross-compiled binaries, heatsink-OS-ARCH")
	chart := fs.String("chart", "", "the packaged chart (.tgz)")
	out := fs.String("out", "out/release", "the output folder")
	ldflags := fs.String("ldflags", "", "the -ldflags the binaries were built with (for the provenance)")
	builder := fs.String("builder", "make release", "where the build ran (for the provenance)")
	_ = fs.Parse(args)
	f, err := release.Load(".")
	if err != nil {
		return err
	}
	if *version != f.Version {
		return fmt.Errorf("VERSION=%s, but release.yaml says %s: the version has one place, change it there", *version, f.Version)
	}
	if *key == "" {
		return fmt.Errorf("no signing key: make release SIGNING_KEY=FILE (an ECDSA P-256 PEM key, e.g. openssl ecparam -genkey -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt)")
	}
	kb, err := os.ReadFile(*key)
	if err != nil {
		return err
	}
	signer, err := release.LoadSigner(kb)
	if err != nil {
		return err
	}
	bins := map[string][]byte{}
	for _, p := range release.CLIPlatforms {
		b, err := os.ReadFile(filepath.Join(*binDir, "heatsink-"+strings.ReplaceAll(p, "/", "-")))
		if err != nil {
			return err
		}
		bins[p] = b
	}
	chartTgz, err := os.ReadFile(*chart)
	if err != nil {
		return err
	}
	base, err := images.LoadBase("images/base")
	if err != nil {
		return err
	}
	linux := map[string][]byte{}
	for _, p := range images.Platforms {
		linux[p.Architecture] = bins["linux/"+p.Architecture]
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	a, err := release.Images(release.Inputs{Version: f.Version, Revision: *revision, Registry: *registry, Binaries: linux, Base: base,
		Chart: chartTgz, Signer: signer, GoVersion: runtime.Version(), LDFlags: *ldflags, Builder: *builder}, filepath.Join(*out, "oci"))
	if err != nil {
		return err
	}
	if err := a.WriteFiles(*out, signer.PublicKeyPEM()); err != nil {
		return err
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		return err
	}
	if err := release.WriteCLI(*out, f.Version, bins, license); err != nil {
		return err
	}
	cl, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		return err
	}
	notes, err := release.Notes(cl, f.Version)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "CHANGELOG-"+f.Version+".md"), append(notes, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s:%s index %s\n", a.Repository, release.SemVer(f.Version), a.Index)
	for arch, d := range a.Platforms {
		fmt.Printf("  linux/%s %s\n", arch, d)
	}
	fmt.Printf("%s/charts/heatsink:%s %s\n", *registry, release.SemVer(f.Version), a.Chart)
	return nil
}

func publish(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ExitOnError)
	from := fs.String("from", "out/release/oci", "the release's OCI image layout")
	registry := fs.String("registry", "", "the registry to push to (as given to build)")
	_ = fs.Parse(args)
	pushed, err := release.Publish(*from, *registry, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	for _, p := range pushed {
		fmt.Println(p)
	}
	return err
}
