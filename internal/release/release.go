// Package release reads release.yaml, the one file that says which version
// of heatsink is being released and which commit was the release before it.
// `make release`, the version skew test and test/repo read it through here,
// so that the version has exactly one place.
package release

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// FileName is the version file, at the repository's root.
const FileName = "release.yaml"

// File is release.yaml.
type File struct {
	// Version is the release being made, as its git tag: vMAJOR.MINOR.PATCH.
	Version  string   `json:"version"`
	Previous Previous `json:"previous"`
}

// Previous is the release before Version.
type Previous struct {
	Version string `json:"version"`
	// Commit is its full git commit (40 hex digits): what the skew test and
	// the upgrade scenario build it from.
	Commit string `json:"commit"`
}

var (
	tagRE    = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// Parse reads and checks the content of a version file.
func Parse(b []byte) (File, error) {
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return File{}, fmt.Errorf("%s: %w", FileName, err)
	}
	if err := CheckTag(f.Version); err != nil {
		return File{}, fmt.Errorf("%s: version: %w", FileName, err)
	}
	if err := CheckTag(f.Previous.Version); err != nil {
		return File{}, fmt.Errorf("%s: previous.version: %w", FileName, err)
	}
	if !commitRE.MatchString(f.Previous.Commit) {
		return File{}, fmt.Errorf("%s: previous.commit %q is not a full git commit (40 lowercase hex digits)", FileName, f.Previous.Commit)
	}
	if f.Previous.Version == f.Version {
		return File{}, fmt.Errorf("%s: previous.version is the version being released", FileName)
	}
	return f, nil
}

// Load reads root/release.yaml.
func Load(root string) (File, error) {
	b, err := os.ReadFile(filepath.Join(root, FileName))
	if err != nil {
		return File{}, err
	}
	return Parse(b)
}

// CheckTag says whether tag is a release tag: "v" and a SemVer 2 version
// without build metadata.
func CheckTag(tag string) error {
	if !tagRE.MatchString(tag) {
		return fmt.Errorf("%q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", tag)
	}
	return nil
}

// SemVer is a tag without its "v": the image tag, the chart's version and
// its appVersion.
func SemVer(tag string) string { return strings.TrimPrefix(tag, "v") }

// ImageTag is the image tag of the release being made.
func (f File) ImageTag() string { return SemVer(f.Version) }
