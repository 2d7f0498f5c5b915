package release

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"net/url"
	"sort"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/heatsink-dev/heatsink/images"
)

// SBOMMediaType is the media type of the SBOM attached to each image.
const SBOMMediaType = "application/vnd.cyclonedx+json"

// Image is one platform image of a release, as its SBOM describes it.
type Image struct {
	// Repository is where it is published, e.g. ghcr.io/heatsink-dev/heatsink.
	Repository, Version, Arch string
	// Digest is its manifest's digest.
	Digest string
	// Binary is the heatsink binary at /heatsink: its Go build info lists
	// the modules it was built from.
	Binary []byte
	// OS and Packages are what the image records as installed (read from it
	// with images.InstalledPackages).
	OS       images.OS
	Packages []images.Package
}

// SBOM is a CycloneDX (1.6, JSON) bill of materials of one platform image:
// the Go modules compiled into its binary, read from the binary's build
// info (what `go version -m` prints, so exactly the versions linked), the
// Go standard library of that toolchain, and the Debian packages the image
// records, with package URLs scanners match against their feeds.
func SBOM(img Image) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(img.Binary))
	if err != nil {
		return nil, fmt.Errorf("sbom: the binary's build info: %w", err)
	}
	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidFromDigest(img.Digest)
	bom.Metadata = &cdx.Metadata{
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "heatsink release (internal/release)", Version: img.Version}}},
		Component: &cdx.Component{
			BOMRef: "image", Type: cdx.ComponentTypeContainer, Name: img.Repository, Version: img.Version,
			PackageURL: ociPURL(img),
		},
	}
	comps := []cdx.Component{{
		BOMRef: "pkg:golang/" + bi.Main.Path, Type: cdx.ComponentTypeApplication, Name: bi.Main.Path, Version: img.Version,
		PackageURL: golangPURL(bi.Main.Path, img.Version), Properties: &[]cdx.Property{{Name: "go", Value: bi.GoVersion}},
	}, {
		BOMRef: "pkg:golang/stdlib", Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: bi.GoVersion,
		PackageURL: golangPURL("stdlib", bi.GoVersion),
	}}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := cdx.Component{BOMRef: golangPURL(m.Path, m.Version), Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: golangPURL(m.Path, m.Version)}
		if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
			c.Properties = &[]cdx.Property{{Name: "go.sum", Value: "h1:" + h}}
		}
		comps = append(comps, c)
	}
	if img.OS.ID != "" {
		comps = append(comps, cdx.Component{BOMRef: "os", Type: cdx.ComponentTypeOS, Name: img.OS.ID, Version: img.OS.VersionID})
	}
	for _, p := range img.Packages {
		purl := debPURL(img.OS, p)
		comps = append(comps, cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: p.Name, Version: p.Version, PackageURL: purl,
			Properties: &[]cdx.Property{{Name: "debian:source", Value: p.Source}}})
	}
	sort.SliceStable(comps[2:], func(i, j int) bool { return comps[2+i].BOMRef < comps[2+j].BOMRef })
	bom.Components = &comps
	var out bytes.Buffer
	if err := cdx.NewBOMEncoder(&out, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ReadSBOM decodes a BOM SBOM wrote.
func ReadSBOM(b []byte) (*cdx.BOM, error) {
	bom := new(cdx.BOM)
	if err := cdx.NewBOMDecoder(bytes.NewReader(b), cdx.BOMFileFormatJSON).Decode(bom); err != nil {
		return nil, err
	}
	return bom, nil
}

func golangPURL(path, version string) string {
	return "pkg:golang/" + path + "@" + url.PathEscape(version)
}

func debPURL(o images.OS, p images.Package) string {
	q := url.Values{"arch": {p.Architecture}}
	if o.ID != "" {
		q.Set("distro", o.ID+"-"+o.VersionID)
	}
	if p.Source != "" && p.Source != p.Name {
		q.Set("upstream", p.Source)
	}
	return "pkg:deb/" + o.ID + "/" + p.Name + "@" + url.PathEscape(p.Version) + "?" + q.Encode()
}

func ociPURL(img Image) string {
	repo := img.Repository
	name := repo[strings.LastIndex(repo, "/")+1:]
	q := url.Values{"arch": {img.Arch}, "repository_url": {repo}, "tag": {img.Version}}
	return "pkg:oci/" + name + "@" + url.PathEscape(img.Digest) + "?" + q.Encode()
}

// uuidFromDigest makes the BOM's serial number from the image's digest: the
// same image always gets the same SBOM (reproducible releases).
func uuidFromDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	for len(h) < 32 {
		h += "0"
	}
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}
