package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// BaseDigest pins the base image (base/, an OCI image layout): the digest
// of its manifest. `heatsink-image base` re-creates the base from Debian's
// packages and prints the digest to put here.
const BaseDigest = "sha256:b4006518cb164dcb2ff0661bbe9b0ab18fc6e1f5f08832e5c9a8182c5367a2de"

// CABundle is where the base keeps the CA certificates (Debian's path, which
// Go's crypto/x509 reads on Linux).
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// BasePackages are the Debian packages the base is made of.
var BasePackages = []string{"ca-certificates", "tzdata"}

// LoadBase reads the base from the OCI image layout at dir and checks it
// is the pinned one: its manifest digest is BaseDigest and every blob
// matches its digest.
func LoadBase(dir string) (v1.Image, error) {
	return loadPinned(dir, BaseDigest)
}

func loadPinned(dir, digest string) (v1.Image, error) {
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, fmt.Errorf("base digest %q: %w", digest, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the base image layout %s: %w", dir, err)
	}
	img, err := idx.Image(h)
	if err != nil {
		return nil, fmt.Errorf("base image %s not in %s (re-create it with `heatsink-image base`): %w", digest, dir, err)
	}
	if err := validate.Image(img); err != nil {
		return nil, fmt.Errorf("base image %s in %s is corrupt: %w", digest, dir, err)
	}
	return img, nil
}

// Deb is a Debian package's name, version, control file and file system.
type Deb struct {
	Name, Version, Architecture string
	// Control is its control file (DEBIAN/control), as dpkg-deb prints it.
	Control string
	// Files are its regular files and symbolic links, by absolute path.
	Files map[string]File
}

// DpkgStatusDir is where the base records its Debian packages, one dpkg
// status entry per file named after the package: the layout of distroless
// images, which the scanners platform teams run (Trivy, Grype/Syft) read,
// since a base with files but no package database shows them nothing.
const DpkgStatusDir = "/var/lib/dpkg/status.d"

// OSRelease is where the base says which distribution its packages are
// from: scanners pick the vulnerability feed by its ID and VERSION_ID.
const OSRelease = "/etc/os-release"

// debianRelease is the Debian release a package version was built for,
// read from its "debNN" suffix (security and stable updates carry one):
// "20250419~deb12u2" is Debian 12.
var debianRelease = regexp.MustCompile(`deb([0-9]+)u[0-9]+`)

// debianCodenames are the Debian releases the base can be made from.
var debianCodenames = map[string]string{"12": "bookworm", "13": "trixie"}

// osRelease is /etc/os-release for Debian release n, as Debian's
// base-files writes it.
func osRelease(n string) ([]byte, error) {
	code, ok := debianCodenames[n]
	if !ok {
		return nil, fmt.Errorf("base: Debian %s is not known (add its codename)", n)
	}
	return []byte(fmt.Sprintf("PRETTY_NAME=\"Debian GNU/Linux %[1]s (%[2]s)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"%[1]s\"\nVERSION=\"%[1]s (%[2]s)\"\nVERSION_CODENAME=%[2]s\nID=debian\nHOME_URL=\"https://www.debian.org/\"\n", n, code)), nil
}

// dpkgStatus is the status entry dpkg writes for an installed package: its
// control file with "Status: install ok installed" after the Package field.
func dpkgStatus(control string) []byte {
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(control, "\n"), "\n") {
		out.WriteString(line + "\n")
		if strings.HasPrefix(line, "Package:") {
			out.WriteString("Status: install ok installed\n")
		}
	}
	return []byte(out.String())
}

// ReadDeb reads a .deb file with dpkg-deb.
func ReadDeb(file string) (*Deb, error) {
	info, err := exec.Command("dpkg-deb", "--show", "--showformat=${Package} ${Version} ${Architecture}", file).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --show %s: %w", file, err)
	}
	f := strings.Fields(string(info))
	if len(f) != 3 {
		return nil, fmt.Errorf("dpkg-deb --show %s: %q", file, info)
	}
	control, err := exec.Command("dpkg-deb", "--field", file).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --field %s: %w", file, err)
	}
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", file, err, stderr.String())
	}
	d := &Deb{Name: f[0], Version: f[1], Architecture: f[2], Control: string(control), Files: map[string]File{}}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		p := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			d.Files[p] = File{Path: p, Mode: h.Mode & 0o7777, Data: b}
		case tar.TypeSymlink:
			d.Files[p] = File{Path: p, Link: h.Linkname}
		}
	}
}

// BuildBase makes the base image from Debian's ca-certificates and tzdata
// packages: the CA bundle as update-ca-certificates writes it (every
// Mozilla certificate, in file name order), /usr/share/zoneinfo without the
// leap-second "right/" copies, the nonroot user, and the packages' dpkg
// status entries and /etc/os-release for scanners. Every package must be
// architecture-independent ("all"): one base serves every platform.
func BuildBase(debs ...*Deb) (v1.Image, error) {
	var files []File
	versions := map[string]string{}
	release := ""
	for _, d := range debs {
		versions[d.Name] = d.Version
		if d.Architecture != "all" {
			return nil, fmt.Errorf("base: %s is for %s, not every architecture", d.Name, d.Architecture)
		}
		m := debianRelease.FindStringSubmatch(d.Version)
		if m == nil || (release != "" && m[1] != release) {
			return nil, fmt.Errorf("base: %s %s is not from the one Debian release of the others (%q)", d.Name, d.Version, release)
		}
		release = m[1]
		files = append(files, File{Path: DpkgStatusDir + "/" + d.Name, Mode: 0o644, Data: dpkgStatus(d.Control)})
		switch d.Name {
		case "ca-certificates":
			var certs []string
			for p := range d.Files {
				if strings.HasPrefix(p, "/usr/share/ca-certificates/mozilla/") && strings.HasSuffix(p, ".crt") {
					certs = append(certs, p)
				}
			}
			if len(certs) == 0 {
				return nil, fmt.Errorf("%s %s has no certificates", d.Name, d.Version)
			}
			sort.Strings(certs)
			var bundle bytes.Buffer
			for _, p := range certs {
				bundle.Write(d.Files[p].Data)
				if !bytes.HasSuffix(d.Files[p].Data, []byte("\n")) {
					bundle.WriteByte('\n')
				}
			}
			files = append(files, File{Path: CABundle, Mode: 0o644, Data: bundle.Bytes()})
		case "tzdata":
			n := 0
			for p, f := range d.Files {
				if strings.HasPrefix(p, "/usr/share/zoneinfo/") && !strings.HasPrefix(p, "/usr/share/zoneinfo/right/") {
					files = append(files, f)
					n++
				}
			}
			if n == 0 {
				return nil, fmt.Errorf("%s %s has no zoneinfo", d.Name, d.Version)
			}
		default:
			return nil, fmt.Errorf("base: unexpected package %s", d.Name)
		}
	}
	for _, p := range BasePackages {
		if versions[p] == "" {
			return nil, fmt.Errorf("base: package %s missing", p)
		}
	}
	osr, err := osRelease(release)
	if err != nil {
		return nil, err
	}
	nonroot := fmt.Sprint(NonRoot)
	files = append(files,
		File{Path: OSRelease, Data: osr},
		File{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		File{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:" + nonroot + ":\n")},
		File{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n")},
		File{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: NonRoot, GID: NonRoot},
		File{Path: "/root", Dir: true, Mode: 0o700},
		File{Path: "/tmp", Dir: true, Mode: 0o1777},
	)
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(fromScratch(), mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "heatsink-image base", Comment: debList(versions),
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: epoch}
	cf.Config.User = nonroot + ":" + nonroot
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "heatsink-base",
		"org.opencontainers.image.description": "CA certificates and time zones from Debian's packages, nonroot user",
		"dev.heatsink.base.debian-packages":    debList(versions),
	}
	return mutate.ConfigFile(img, cf)
}

func debList(versions map[string]string) string {
	var out []string
	for n, v := range versions {
		out = append(out, n+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// WriteBase writes img as the only image of a new OCI image layout at dir.
func WriteBase(dir string, img v1.Image) (v1.Hash, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}
