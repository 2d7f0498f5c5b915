package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// CLIPlatforms are the platforms the heatsink CLI is released for (the
// images are linux only; the CLI's `top` runs where kubectl runs).
var CLIPlatforms = []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}

// ReleaseURL is where the CLI archives are downloaded from: the GitHub
// release of the tag.
const ReleaseURL = "https://github.com/heatsink-dev/heatsink/releases/download"

// ArchiveName is the CLI archive of one platform ("linux/amd64").
func ArchiveName(version, platform string) string {
	return "heatsink_" + SemVer(version) + "_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"
}

// Archive is a reproducible .tar.gz of the heatsink binary and the licence
// (entries dated at the epoch, owned by root): the same binary gives the
// same checksum.
func Archive(binary, license []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.ModTime = time.Unix(0, 0)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		b    []byte
	}{{"LICENSE", 0o644, license}, {"heatsink", 0o755, binary}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.b)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Checksums is a checksums file in `sha256sum` format (`sha256sum -c`
// checks it), sorted by name.
func Checksums(files map[string][]byte) []byte {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum := sha256.Sum256(files[n])
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	return []byte(b.String())
}

// KrewManifest is the krew plugin manifest of the release: `kubectl krew
// install --manifest=heatsink.yaml` installs `kubectl heatsink`, the
// binary linked as kubectl-heatsink (which makes it print its usage as
// the plugin). archives are the CLI archives by name.
func KrewManifest(version string, archives map[string][]byte) ([]byte, error) {
	type selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	type platform struct {
		Selector selector `json:"selector"`
		URI      string   `json:"uri"`
		SHA256   string   `json:"sha256"`
		Bin      string   `json:"bin"`
	}
	var ps []platform
	for _, p := range CLIPlatforms {
		n := ArchiveName(version, p)
		a, ok := archives[n]
		if !ok {
			return nil, fmt.Errorf("krew: no archive %s", n)
		}
		osName, arch, _ := strings.Cut(p, "/")
		sum := sha256.Sum256(a)
		ps = append(ps, platform{Selector: selector{map[string]string{"os": osName, "arch": arch}},
			URI: ReleaseURL + "/" + version + "/" + n, SHA256: hex.EncodeToString(sum[:]), Bin: "heatsink"})
	}
	return yaml.Marshal(map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]string{"name": "heatsink"},
		"spec": map[string]any{
			"version":          version,
			"homepage":         "https://github.com/heatsink-dev/heatsink",
			"shortDescription": "Watch the hottest Redis keys heatsink sees, live",
			"description":      "heatsink finds hot keys in Redis and spreads their load. The plugin shows a HotKeyPolicy's\nhottest keys and what was done about them, read-only, with your kubeconfig:\n\n  kubectl heatsink top POLICY -n NAMESPACE\n",
			"platforms":        ps,
		},
	})
}

// Notes is the section of CHANGELOG.md for version: from its "## version"
// heading to the next "## " heading.
func Notes(changelog []byte, version string) ([]byte, error) {
	re := regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(version) + `\b.*$`)
	loc := re.FindIndex(changelog)
	if loc == nil {
		return nil, fmt.Errorf("CHANGELOG.md has no section %q", "## "+version)
	}
	rest := changelog[loc[0]:]
	if next := regexp.MustCompile(`(?m)^## `).FindAllIndex(rest, 2); len(next) == 2 {
		rest = rest[:next[1][0]]
	}
	return bytes.TrimSpace(rest), nil
}

// WriteCLI writes the CLI archives, checksums.txt and the krew manifest
// into dir from the binaries by platform ("linux/amd64").
func WriteCLI(dir, version string, binaries map[string][]byte, license []byte) error {
	archives := map[string][]byte{}
	for _, p := range CLIPlatforms {
		b, ok := binaries[p]
		if !ok {
			return fmt.Errorf("cli: no %s binary", p)
		}
		a, err := Archive(b, license)
		if err != nil {
			return err
		}
		archives[ArchiveName(version, p)] = a
	}
	krew, err := KrewManifest(version, archives)
	if err != nil {
		return err
	}
	files := map[string][]byte{"checksums.txt": Checksums(archives), "heatsink.krew.yaml": krew}
	for n, b := range archives {
		files[n] = b
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
