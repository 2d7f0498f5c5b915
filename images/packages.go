package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Package is one Debian package an image records as installed.
type Package struct {
	Name, Version, Architecture, Source string
}

// OS is the distribution an image's /etc/os-release names.
type OS struct {
	ID, VersionID string
}

// InstalledPackages reads what a scanner reads from img: /etc/os-release and
// the dpkg status entries under DpkgStatusDir, from its flattened file
// system. The SBOM lists the base's packages from here, so it says what
// the image holds, not what the build meant to put in it.
func InstalledPackages(img v1.Image) (OS, []Package, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	var osr OS
	var pkgs []Package
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return OS{}, nil, err
		}
		p := path.Clean("/" + h.Name)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case p == OSRelease:
			b, err := io.ReadAll(tr)
			if err != nil {
				return OS{}, nil, err
			}
			osr = parseOSRelease(b)
		case path.Dir(p) == DpkgStatusDir && !strings.Contains(path.Base(p), "."):
			h, err := textproto.NewReader(bufio.NewReader(tr)).ReadMIMEHeader()
			if err != nil && !errors.Is(err, io.EOF) {
				return OS{}, nil, fmt.Errorf("%s: %w", p, err)
			}
			pk := Package{Name: h.Get("Package"), Version: h.Get("Version"), Architecture: h.Get("Architecture"), Source: h.Get("Source")}
			if pk.Name == "" || pk.Version == "" || !strings.Contains(h.Get("Status"), "installed") {
				return OS{}, nil, fmt.Errorf("%s: not an installed package's status entry", p)
			}
			if pk.Source == "" {
				pk.Source = pk.Name
			}
			// "Source: name (version)" names a source version that differs.
			pk.Source, _, _ = strings.Cut(pk.Source, " ")
			pkgs = append(pkgs, pk)
		}
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return osr, pkgs, nil
}

func parseOSRelease(b []byte) OS {
	var o OS
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := strings.Cut(string(line), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			o.ID = v
		case "VERSION_ID":
			o.VersionID = v
		}
	}
	return o
}
