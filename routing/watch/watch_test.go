package watch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/watch"
)

func tableJSON(t *testing.T, version int64, schema int, keys ...string) string {
	t.Helper()
	tb := routing.Table{SchemaVersion: schema, Policy: "shop/checkout", Version: version, EpochMillis: 60_000}
	for _, k := range keys {
		tb.Entries = append(tb.Entries, routing.Entry{Key: k, Source: routing.SourceDetected, Coalesce: true})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAccept(t *testing.T) {
	cur := &routing.Table{SchemaVersion: 1, Version: 5, EpochMillis: 1000}
	for name, tc := range map[string]struct {
		current *routing.Table
		data    string
		want    int64 // accepted version; 0 = none
		err     string
	}{
		"first table":        {current: nil, data: tableJSON(t, 1, 1, "a"), want: 1},
		"newer":              {current: cur, data: tableJSON(t, 6, 1, "a"), want: 6},
		"same version":       {current: cur, data: tableJSON(t, 5, 1, "b")},
		"older":              {current: cur, data: tableJSON(t, 4, 1), err: "older"},
		"future schema":      {current: cur, data: tableJSON(t, 9, routing.SchemaVersion+1), err: "schemaVersion"},
		"not json":           {current: cur, data: "{routing", err: "routing table"},
		"empty":              {current: cur, data: "", err: "routing table"},
		"invalid (unsorted)": {current: cur, data: tableJSON(t, 7, 1, "b", "a"), err: "sorted"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := watch.Accept(tc.current, []byte(tc.data))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == 0) || (got != nil && got.Version != tc.want) {
				t.Fatalf("accepted %+v, want version %d", got, tc.want)
			}
		})
	}
}

// recorder collects what a watcher reports.
type recorder struct {
	mu       sync.Mutex
	versions []int64
	rejects  []string
}

func (r *recorder) table(t *routing.Table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, t.Version)
}

func (r *recorder) reject(src watch.Source, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejects = append(r.rejects, string(src)+": "+err.Error())
}

func (r *recorder) last() (int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.versions) == 0 {
		return 0, len(r.rejects)
	}
	return r.versions[len(r.versions)-1], len(r.rejects)
}

func TestWatcherFollowsConfigMapAndKeepsLastGood(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, policy = "shop", "checkout"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// The watcher reaches the API server through a TCP relay the test can
	// cut, to take the API server away without stopping it.
	relay := newRelay(t, cp.Config.Host)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Host = relay.url
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	rec := &recorder{}
	w, err := watch.New(watch.Options{
		Client: cs, Namespace: ns, Policy: policy,
		File: file, FilePoll: 20 * time.Millisecond,
		OnTable: rec.table, OnReject: rec.reject,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	cms := admin.CoreV1().ConfigMaps(ns)
	// Another ConfigMap in the namespace is not looked at.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-routing"},
		Data: map[string]string{routing.ConfigMapKey: tableJSON(t, 99, 1, "x")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: routing.ConfigMapName(policy)},
		Data: map[string]string{routing.ConfigMapKey: tableJSON(t, 1, 1, "product:1")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "version 1", func() bool { v, _ := rec.last(); return v == 1 })

	publish := func(data string) {
		t.Helper()
		cm.Data[routing.ConfigMapKey] = data
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	publish(tableJSON(t, 2, 1, "product:1", "product:2"))
	eventually.True(t, 20*time.Second, "version 2", func() bool { v, _ := rec.last(); return v == 2 })

	// Bad publications are refused one by one; version 2 stays.
	for i, bad := range []string{
		"{not json",
		tableJSON(t, 3, routing.SchemaVersion+1, "a"),
		tableJSON(t, 1, 1, "a"),
	} {
		publish(bad)
		eventually.True(t, 20*time.Second, fmt.Sprintf("reject %d", i+1), func() bool { _, r := rec.last(); return r == i+1 })
		if v, _ := rec.last(); v != 2 || w.Current().Version != 2 {
			t.Fatalf("after bad table %d current version = %d", i, v)
		}
	}
	publish(tableJSON(t, 3, 1, "product:3"))
	eventually.True(t, 20*time.Second, "version 3", func() bool { v, _ := rec.last(); return v == 3 })

	// The API server goes away: the table stays, and the mounted file
	// still brings newer tables (and only newer ones).
	relay.cut()
	publish(tableJSON(t, 5, 1, "unreachable"))
	if got := w.Current(); got == nil || got.Version != 3 {
		t.Fatalf("after the API server stopped current = %+v", got)
	}
	_, rejects := rec.last()
	if err := os.WriteFile(file, []byte(tableJSON(t, 2, 1, "old")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "stale file refused", func() bool { _, r := rec.last(); return r == rejects+1 })
	if err := os.WriteFile(file, []byte(tableJSON(t, 4, 1, "product:4")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "version 4 from the file", func() bool { v, _ := rec.last(); return v == 4 })
	if got := w.Current().Entries[0].Key; got != "product:4" {
		t.Fatalf("current entry = %q", got)
	}
}

func TestWatcherFileOnlyStartsWithMountedTable(t *testing.T) {
	file := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	if err := os.WriteFile(file, []byte(tableJSON(t, 7, 1, "k")), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w, err := watch.New(watch.Options{File: file, OnTable: rec.table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	eventually.True(t, 20*time.Second, "the mounted table", func() bool { v, _ := rec.last(); return v == 7 })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := watch.New(watch.Options{OnTable: rec.table}); err == nil {
		t.Fatal("New without a source: want an error")
	}
}

// relay forwards TCP connections to the API server until cut.
type relay struct {
	url   string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newRelay(t *testing.T, host string) *relay {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, url: u.Scheme + "://" + ln.Addr().String()}
	t.Cleanup(r.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return r
}

// cut closes the listener and every relayed connection.
func (r *relay) cut() {
	_ = r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}
