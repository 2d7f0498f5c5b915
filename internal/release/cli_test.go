package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCLIArtefacts writes the CLI artefacts of four stand-in binaries and
// checks them as a user would: sha256sum -c on the checksums, the archive's
// binary, the krew manifest's platforms and checksums, and the notes.
func TestCLIArtefacts(t *testing.T) {
	dir := t.TempDir()
	bins := map[string][]byte{}
	for _, p := range CLIPlatforms {
		bins[p] = []byte("binary for " + p)
	}
	if err := WriteCLI(dir, "v0.3.0", bins, []byte("Apache License")); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", "checksums.txt")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 4 {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
	}
	a, err := os.ReadFile(filepath.Join(dir, "heatsink_0.3.0_darwin_arm64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
		if h.Name == "heatsink" && h.Mode != 0o755 {
			t.Errorf("heatsink mode %o", h.Mode)
		}
	}
	if files["heatsink"] != "binary for darwin/arm64" || files["LICENSE"] != "Apache License" {
		t.Errorf("archive holds %v", files)
	}
	again, err := Archive(bins["darwin/arm64"], []byte("Apache License"))
	if err != nil || !bytes.Equal(again, a) {
		t.Errorf("the same binary gives another archive (err %v): checksums would not be reproducible", err)
	}
	var krew struct {
		Kind string
		Spec struct {
			Version   string
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string } `json:"selector"`
				URI, SHA256, Bin string
			}
		}
	}
	kb, err := os.ReadFile(filepath.Join(dir, "heatsink.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(kb, &krew); err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, "checksums.txt"))
	if krew.Kind != "Plugin" || krew.Spec.Version != "v0.3.0" || len(krew.Spec.Platforms) != 4 {
		t.Fatalf("krew manifest: %s", kb)
	}
	for _, p := range krew.Spec.Platforms {
		name := "heatsink_0.3.0_" + p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"] + ".tar.gz"
		if !strings.HasSuffix(p.URI, "/v0.3.0/"+name) || !strings.Contains(string(sums), p.SHA256+"  "+name) || p.Bin != "heatsink" {
			t.Errorf("krew platform %+v does not match %s in checksums.txt", p, name)
		}
	}
	notes, err := Notes([]byte("# Changelog\n\n## v0.3.0\n\nnew\n\n## v0.2.0\n\nold\n"), "v0.3.0")
	if err != nil || string(notes) != "## v0.3.0\n\nnew" {
		t.Errorf("Notes = %q, %v", notes, err)
	}
	if _, err := Notes([]byte("## v0.2.0\n"), "v0.3.0"); err == nil {
		t.Error("no section: want an error")
	}
}
