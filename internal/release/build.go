package release

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/heatsink-dev/heatsink/images"
)

// RefAnnotation names, in the release's OCI image layout, the reference
// each manifest is published under (repository:tag); Publish pushes each
// there, with the registry part replaced by the one given.
const RefAnnotation = "org.opencontainers.image.ref.name"

// RegistryAnnotation, on the layout's index, is the registry the release
// was built for: its signatures name repositories there.
const RegistryAnnotation = "dev.heatsink.release.registry"

// Inputs is what Images assembles a release's OCI artefacts from.
type Inputs struct {
	// Version is the release tag (release.yaml's), Revision the git commit.
	Version, Revision string
	// Registry is where the artefacts will be published, e.g.
	// ghcr.io/heatsink-dev: the image is Registry/heatsink, the chart
	// Registry/charts/heatsink. Signatures name it, so it is fixed at build.
	Registry string
	// Binaries are the static linux heatsink binaries by GOARCH, one per
	// images.Platforms entry.
	Binaries map[string][]byte
	Base     v1.Image
	// Chart is the packaged chart (helm package's .tgz).
	Chart  []byte
	Signer *Signer
	// GoVersion, LDFlags and Builder go into the provenance.
	GoVersion, LDFlags, Builder string
}

// Artefacts is what Images made.
type Artefacts struct {
	Repository string
	Index      v1.Hash
	// Platforms are the platform manifests by GOARCH.
	Platforms map[string]v1.Hash
	// SBOMs by GOARCH; Provenance is the in-toto statement.
	SBOMs      map[string][]byte
	Provenance []byte
	Chart      v1.Hash
}

// Images assembles the release into an OCI image layout at dir: the
// multi-arch image index (tag = the version without "v"), each platform's
// CycloneDX SBOM attached to its manifest, the SLSA provenance attached to
// the index as a signed attestation, a cosign signature of the index and of
// each platform manifest, and the chart as Helm's OCI artifact, each
// manifest annotated with the reference it is published under.
func Images(in Inputs, dir string) (*Artefacts, error) {
	repo, err := name.NewRepository(in.Registry + "/heatsink")
	if err != nil {
		return nil, err
	}
	tag := SemVer(in.Version)
	out := &Artefacts{Repository: repo.Name(), Platforms: map[string]v1.Hash{}, SBOMs: map[string][]byte{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	type tagged struct {
		ref string
		img v1.Image
	}
	var attached []tagged
	osr, pkgs, err := images.InstalledPackages(in.Base)
	if err != nil {
		return nil, err
	}
	for _, p := range images.Platforms {
		bin := in.Binaries[p.Architecture]
		if len(bin) == 0 {
			return nil, fmt.Errorf("release: no %s binary", p.Architecture)
		}
		img, err := images.BuildHeatsink(in.Base, images.Heatsink{Binary: bin, Version: tag, Revision: in.Revision,
			Source: "https://github.com/heatsink-dev/heatsink", Arch: p.Architecture})
		if err != nil {
			return nil, err
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		out.Platforms[p.Architecture] = d
		sbom, err := SBOM(Image{Repository: repo.Name(), Version: tag, Arch: p.Architecture, Digest: d.String(), Binary: bin, OS: osr, Packages: pkgs})
		if err != nil {
			return nil, err
		}
		out.SBOMs[p.Architecture] = sbom
		sbomImg, err := artifact(sbom, SBOMMediaType, nil)
		if err != nil {
			return nil, err
		}
		sig, err := in.Signer.SignatureImage(repo, d)
		if err != nil {
			return nil, err
		}
		attached = append(attached, tagged{AttachedTag(d, SBOMTagSuffix), sbomImg}, tagged{AttachedTag(d, SignatureTagSuffix), sig})
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	idx = mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version":  tag,
		"org.opencontainers.image.revision": in.Revision,
		"org.opencontainers.image.source":   "https://github.com/heatsink-dev/heatsink",
	}).(v1.ImageIndex)
	if out.Index, err = idx.Digest(); err != nil {
		return nil, err
	}
	subjects := map[string]v1.Hash{repo.Tag(tag).Name(): out.Index}
	for arch, d := range out.Platforms {
		subjects[repo.Name()+"@linux/"+arch] = d
	}
	baseDigest, err := in.Base.Digest()
	if err != nil {
		return nil, err
	}
	out.Provenance, err = ProvenanceStatement(subjects, BuildInputs{Version: in.Version, Revision: in.Revision,
		Source: "https://github.com/heatsink-dev/heatsink", GoVersion: in.GoVersion, LDFlags: in.LDFlags, BaseDigest: baseDigest, Builder: in.Builder})
	if err != nil {
		return nil, err
	}
	att, err := in.Signer.AttestationImage(out.Provenance, ProvenancePredicate)
	if err != nil {
		return nil, err
	}
	sig, err := in.Signer.SignatureImage(repo, out.Index)
	if err != nil {
		return nil, err
	}
	attached = append(attached, tagged{AttachedTag(out.Index, AttestationTagSuffix), att}, tagged{AttachedTag(out.Index, SignatureTagSuffix), sig})
	chart, err := ChartArtifact(in.Chart)
	if err != nil {
		return nil, err
	}
	if out.Chart, err = chart.Digest(); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	lp, err := layout.Write(dir, mutate.Annotations(empty.Index, map[string]string{RegistryAnnotation: in.Registry}).(v1.ImageIndex))
	if err != nil {
		return nil, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefAnnotation: "heatsink:" + tag})); err != nil {
		return nil, err
	}
	sort.Slice(attached, func(i, j int) bool { return attached[i].ref < attached[j].ref })
	for _, a := range attached {
		if err := lp.AppendImage(a.img, layout.WithAnnotations(map[string]string{RefAnnotation: "heatsink:" + a.ref})); err != nil {
			return nil, err
		}
	}
	if err := lp.AppendImage(chart, layout.WithAnnotations(map[string]string{RefAnnotation: "charts/heatsink:" + tag})); err != nil {
		return nil, err
	}
	return out, nil
}

// WriteFiles writes the SBOMs, the provenance and the public key beside
// the layout, for those who read them without a registry client.
func (a *Artefacts) WriteFiles(dir string, pub []byte) error {
	files := map[string][]byte{"provenance.intoto.json": a.Provenance, "cosign.pub": pub}
	for arch, b := range a.SBOMs {
		files["sbom-linux-"+arch+".cdx.json"] = b
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
