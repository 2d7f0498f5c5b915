// Package watch follows a policy's published routing table and hands every
// newer good table to a callback (the engine's SetTable).
//
// It has two sources: the ConfigMap "<policy>-routing" through the API
// server (a client-go informer restricted to that one name, so changes
// arrive within a watch event, well under a second), and, as a fallback, the
// same ConfigMap mounted as a file and polled, which keeps working when the
// API server is away. Both feed one acceptance rule (Accept): a table is
// taken only if it parses, its schemaVersion is one this build reads, and its
// version is greater than the current one. Anything else is reported and
// ignored, so the data path keeps the last good table.
//
// It lives apart from package routing so that importers of the table types
// (the go-redis hook in an application) do not pull in client-go.
package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/routing"
)

// Source names where a table came from, for logs and OnReject.
type Source string

const (
	// SourceAPI is the ConfigMap read through the API server.
	SourceAPI Source = "api"
	// SourceFile is the mounted ConfigMap file.
	SourceFile Source = "file"
)

// Options configures a Watcher. OnTable is required, and at least one of
// Client or File.
type Options struct {
	// Client reads the ConfigMap through the API server; nil for file only.
	Client kubernetes.Interface
	// Namespace and Policy name the policy whose table is followed.
	Namespace, Policy string
	// File is the path of the mounted ConfigMap key (…/routing.json); empty
	// for API only.
	File string
	// FilePoll is how often File is read (default 1s).
	FilePoll time.Duration
	// Clock drives file polling (default: real clock).
	Clock clock.WithTicker
	// OnTable receives each accepted table, in increasing version order,
	// never concurrently.
	OnTable func(*routing.Table)
	// OnReject, if set, is told about each published table that was not
	// accepted, and why.
	OnReject func(Source, error)
	// Log receives reasons for rejected tables (never the table's keys).
	Log logr.Logger
}

// Watcher follows one routing table. Create it with New and start it with
// Run.
type Watcher struct {
	opts Options

	mu       sync.Mutex
	current  *routing.Table
	lastFile []byte
}

// New returns a watcher; it does nothing until Run.
func New(opts Options) (*Watcher, error) {
	if opts.OnTable == nil {
		return nil, errors.New("watch: OnTable is required")
	}
	if opts.Client == nil && opts.File == "" {
		return nil, errors.New("watch: need a Client, a File or both")
	}
	if opts.Client != nil && (opts.Namespace == "" || opts.Policy == "") {
		return nil, errors.New("watch: Namespace and Policy are required with a Client")
	}
	if opts.FilePoll <= 0 {
		opts.FilePoll = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Watcher{opts: opts}, nil
}

// Current returns the last accepted table, or nil before the first.
func (w *Watcher) Current() *routing.Table {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Accept decides whether a published table replaces the current one
// (nil before the first). It returns the parsed table, or an error saying
// why it is refused; a nil table with a nil error means "same version,
// nothing to do".
func Accept(current *routing.Table, data []byte) (*routing.Table, error) {
	t, err := routing.Parse(data)
	if err != nil {
		return nil, err
	}
	if current != nil {
		switch {
		case t.Version < current.Version:
			return nil, fmt.Errorf("routing table version %d is older than the current %d", t.Version, current.Version)
		case t.Version == current.Version:
			return nil, nil
		}
	}
	return t, nil
}

// offer runs Accept on a published table and hands an accepted one to
// OnTable.
func (w *Watcher) offer(src Source, data []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, err := Accept(w.current, data)
	if err != nil {
		w.rejectLocked(src, err)
		return
	}
	if t == nil {
		return
	}
	w.current = t
	w.opts.OnTable(t)
}

func (w *Watcher) reject(src Source, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rejectLocked(src, err)
}

func (w *Watcher) rejectLocked(src Source, err error) {
	w.opts.Log.Info("routing table refused, keeping the last good one", "source", src, "reason", err.Error())
	if w.opts.OnReject != nil {
		w.opts.OnReject(src, err)
	}
}

// Run follows the table until ctx ends. The file, if any, is read once
// before Run waits for the informer, so a sidecar starting while the API
// server is away starts with the mounted table.
func (w *Watcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if w.opts.File != "" {
		w.pollFile()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runFile(ctx)
		}()
	}
	if w.opts.Client != nil {
		w.runInformer(ctx)
	}
	wg.Wait()
	return nil
}

func (w *Watcher) runFile(ctx context.Context) {
	t := w.opts.Clock.NewTicker(w.opts.FilePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.pollFile()
		}
	}
}

// pollFile offers the file's content when it changed since the last read.
// A missing file is not an error: the volume may not be mounted yet.
func (w *Watcher) pollFile() {
	data, err := os.ReadFile(w.opts.File)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			w.opts.Log.Info("cannot read the routing table file", "file", w.opts.File, "reason", err.Error())
		}
		return
	}
	w.mu.Lock()
	same := bytes.Equal(data, w.lastFile)
	w.lastFile = data
	w.mu.Unlock()
	if !same {
		w.offer(SourceFile, data)
	}
}

func (w *Watcher) runInformer(ctx context.Context) {
	name := routing.ConfigMapName(w.opts.Policy)
	factory := informers.NewSharedInformerFactoryWithOptions(w.opts.Client, 0,
		informers.WithNamespace(w.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	handle := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != name {
			return
		}
		data, ok := cm.Data[routing.ConfigMapKey]
		if !ok {
			w.reject(SourceAPI, fmt.Errorf("ConfigMap %s/%s has no key %q", cm.Namespace, cm.Name, routing.ConfigMapKey))
			return
		}
		w.offer(SourceAPI, []byte(data))
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
		// A deleted ConfigMap leaves the last table in force: dropping it
		// would stop reads from summing split shards that still hold data.
		// The manager publishes an emptied table when mitigations end.
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}
