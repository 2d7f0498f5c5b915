package watch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/routing"
)

// emptyKubeletVolume lays dir out as the kubelet does for an optional
// ConfigMap that does not exist: ..data, a symlink to an empty timestamped
// directory, and nothing else.
func emptyKubeletVolume(t *testing.T, dir string) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..2026_01_01_00_00_00.")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, watch.KubeletDataDir)); err != nil {
		t.Fatal(err)
	}
}

func TestUnpublishedNeedsTheKubeletsVolume(t *testing.T) {
	kubelet := t.TempDir()
	emptyKubeletVolume(t, kubelet)
	withFile := t.TempDir()
	emptyKubeletVolume(t, withFile)
	if err := os.WriteFile(filepath.Join(withFile, routing.ConfigMapKey), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file string
		want bool
	}{
		"kubelet volume of an absent ConfigMap": {filepath.Join(kubelet, routing.ConfigMapKey), true},
		"kubelet volume holding the table":      {filepath.Join(withFile, routing.ConfigMapKey), false},
		"plain directory, no file":              {filepath.Join(t.TempDir(), routing.ConfigMapKey), false},
		"no directory":                          {filepath.Join(t.TempDir(), "nope", routing.ConfigMapKey), false},
	} {
		if got := watch.Unpublished(tc.file); got != tc.want {
			t.Errorf("%s: Unpublished = %v, want %v", name, got, tc.want)
		}
	}
}

// TestInForceFromTheMountedVolume: the watcher tells the state in force
// from a mounted table (SourceFile) and from the kubelet's volume of a
// ConfigMap that does not exist (SourceUnpublished), at its first read.
func TestInForceFromTheMountedVolume(t *testing.T) {
	withTable := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	if err := os.WriteFile(withTable, []byte(tableJSON(t, 3, 1, "k")), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	emptyKubeletVolume(t, empty)
	for file, want := range map[string]watch.Source{
		withTable: watch.SourceFile,
		filepath.Join(empty, routing.ConfigMapKey): watch.SourceUnpublished,
	} {
		rec := &recorder{}
		w, err := watch.New(watch.Options{File: file, OnTable: rec.table, FilePoll: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if w.InForceSource() != "" {
			t.Fatalf("in force before Run: %s", w.InForceSource())
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		select {
		case <-w.InForce():
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not in force", file)
		}
		if got := w.InForceSource(); got != want {
			t.Errorf("%s: in force from %q, want %q", file, got, want)
		}
		cancel()
		<-done
	}
}
