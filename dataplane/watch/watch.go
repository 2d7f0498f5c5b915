// Package watch follows a policy's published routing table and hands every
// newer good table to a callback (the engine's SetTable).
//
// It has two sources, and needs no credentials for the API server: the
// node agent of the sidecar's node (the node agent DaemonSet), which the
// manager pushes every table to and which streams each newer one to the
// sidecar as soon as it holds it (well under a second; package sidecarlink
// has the request and the stream's frames), and, as a fallback, the routing
// ConfigMap mounted as a file and polled, which keeps working when the node
// agent is away. Both feed one acceptance rule (Accept): a table is taken
// only if it parses, its schemaVersion is one this build reads, and its
// version is greater than the current one. Anything else is reported and
// ignored, so the data path keeps the last good table. InForce tells when
// the routing state in force is known (inforce.go): the sidecar serves no
// client before.
//
// It lives apart from package routing so that importers of the table types
// (the go-redis hook in an application) do not pull in an HTTP client loop.
package watch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Source names where a table came from, for logs and OnReject.
type Source string

const (
	// SourceAgent is the node agent's routing server.
	SourceAgent Source = "agent"
	// SourceFile is the mounted ConfigMap file.
	SourceFile Source = "file"
)

// Options configures a Watcher. OnTable is required, and at least one of
// Agent or File.
type Options struct {
	// Agent is "host:port" of the node agent's routing server; empty for
	// file only.
	Agent string
	// HTTPClient reaches the agent; default a client with no overall
	// timeout (the stream is long) that dials in AgentDialTimeout.
	HTTPClient *http.Client
	// Heartbeat is the agent's heartbeat interval on the stream (default
	// sidecarlink.DefaultHeartbeat). Nothing from the agent for Heartbeat
	// plus 10 s ends the stream.
	Heartbeat time.Duration
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
	// OnAgent, if set, is told the counts version the agent reads
	// (sidecarlink.AgentCountsVersion) at each answer of the agent to a
	// routing request, before its tables: what the counts client
	// (counts.Client.SetAgentVersion) writes to it.
	OnAgent func(countsVersion int)
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
	// served is the newest version the agent served, accepted or not: the
	// next request asks for newer ones only, so a refused table is not fetched
	// again and again.
	served int64
	// inForce is closed, and inForceSrc set, once the routing state in
	// force is known (inforce.go).
	inForce    chan struct{}
	inForceSrc Source
}

// New returns a watcher; it does nothing until Run.
func New(opts Options) (*Watcher, error) {
	if opts.OnTable == nil {
		return nil, errors.New("watch: OnTable is required")
	}
	if opts.Agent == "" && opts.File == "" {
		return nil, errors.New("watch: need an Agent, a File or both")
	}
	if opts.Agent != "" && (opts.Namespace == "" || opts.Policy == "") {
		return nil, errors.New("watch: Namespace and Policy are required with an Agent")
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = sidecarlink.DefaultHeartbeat
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{
			DialContext:       (&net.Dialer{Timeout: AgentDialTimeout}).DialContext,
			ForceAttemptHTTP2: false,
		}}
	}
	if opts.FilePoll <= 0 {
		opts.FilePoll = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Watcher{opts: opts, inForce: make(chan struct{})}, nil
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
	w.markInForceLocked(src)
}

func (w *Watcher) rejectLocked(src Source, err error) {
	w.opts.Log.Info("routing table refused, keeping the last good one", "source", src, "reason", err.Error())
	if w.opts.OnReject != nil {
		w.opts.OnReject(src, err)
	}
}

// Run follows the table until ctx ends. The file, if any, is read once
// before the first request to the agent, so a sidecar starting while its node
// agent is away starts with the mounted table.
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
	if w.opts.Agent != "" {
		w.runAgent(ctx)
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
		} else if !w.inForceKnown() && Unpublished(w.opts.File) {
			w.mu.Lock()
			w.markInForceLocked(SourceUnpublished)
			w.mu.Unlock()
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

// AgentDialTimeout bounds a connection attempt to the node agent.
const AgentDialTimeout = 2 * time.Second

// Backoff after a failed request to the agent: from minBackoff to maxBackoff, doubling,
// jittered by ±50% so that a node's sidecars do not retry in step.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// runAgent follows the node agent's tables until ctx ends: it holds a
// stream from the agent, and opens a new one when it ends. A failed request
// or a lost stream (agent away, restarting) keeps the last good table and
// retries with backoff.
func (w *Watcher) runAgent(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		err := w.followAgent(ctx)
		if err == nil {
			backoff = minBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		w.opts.Log.V(1).Info("node agent request failed; keeping the last table", "agent", w.opts.Agent, "reason", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-w.opts.Clock.After(time.Duration(float64(backoff) * (0.5 + rand.Float64()))):
		}
		ceiling := maxBackoff
		if !w.inForceKnown() {
			ceiling = startupMaxBackoff
		}
		backoff = min(2*backoff, ceiling)
	}
}

// followAgent opens one stream of tables newer than the current one and
// offers each as it comes. The stream ends, and the agent is taken for
// lost, when nothing (not even a heartbeat frame) came for Heartbeat plus
// ten seconds. It returns nil when the stream brought at least one frame,
// so the next one opens at once.
func (w *Watcher) followAgent(ctx context.Context) error {
	w.mu.Lock()
	after := w.served
	if w.current != nil {
		after = max(after, w.current.Version)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := w.opts.Heartbeat + 10*time.Second
	watchdog := time.AfterFunc(idle, cancel)
	defer watchdog.Stop()
	uri := sidecarlink.RoutingRequest{Namespace: w.opts.Namespace, Name: w.opts.Policy, After: after, Heartbeat: w.opts.Heartbeat}.URI()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.opts.Agent+uri, nil)
	if err != nil {
		return err
	}
	resp, err := w.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != sidecarlink.StreamContentType {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("node agent answered %s (%s): %s", resp.Status, resp.Header.Get("Content-Type"), bytes.TrimSpace(msg))
	}
	if w.opts.OnAgent != nil {
		w.opts.OnAgent(sidecarlink.AgentCountsVersion(resp.Header))
	}
	frames := 0
	err = sidecarlink.ReadFrames(bufio.NewReader(resp.Body), func(version int64, table []byte) {
		watchdog.Reset(idle)
		frames++
		if version > 0 {
			w.take(version, table)
		}
	})
	if frames > 0 && ctx.Err() == nil {
		return nil // the agent ended a stream that worked: ask again
	}
	return err
}

// take offers a table the agent served as version, and remembers the
// version so that the next request asks for newer ones only: a refused
// table is not fetched again and again.
func (w *Watcher) take(version int64, data []byte) {
	w.mu.Lock()
	w.served = max(w.served, version)
	w.mu.Unlock()
	w.offer(SourceAgent, data)
}
