package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/routing"
)

// What the run learns as it goes: the node simulator's events and the routing
// versions the API server holds.

// eventStore collects what the node simulator prints. The reader only
// parses and stores, never waits, so the simulator never blocks on its
// stdout; the run loop is told of the events it waits on.
type eventStore struct {
	spn    int
	notify chan simproto.Event

	mu      sync.Mutex
	routing []sidecarEvent
	// agents are the agentRouting events, each as a sidecarEvent whose
	// sidecar is the node, by policy.
	agents    map[int][]sidecarEvent
	progress  map[string]float64
	stats     map[string]float64
	errMsg    string
	badLines  int
	firstBad  string
	readerEnd error
}

func (s *eventStore) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		e, err := simproto.ParseEvent(sc.Bytes())
		s.mu.Lock()
		switch {
		case err != nil:
			s.badLines++
			if s.firstBad == "" {
				s.firstBad = err.Error()
			}
		case e.Event == simproto.EventRouting:
			s.routing = append(s.routing, sidecarEvent{sidecar: e.Node*s.spn + e.Sidecar, version: e.Version, at: e.Time()})
		case e.Event == simproto.EventAgentRouting:
			if s.agents == nil {
				s.agents = map[int][]sidecarEvent{}
			}
			s.agents[e.Policy] = append(s.agents[e.Policy], sidecarEvent{sidecar: e.Node, version: e.Version, at: e.Time()})
		case e.Event == simproto.EventProgress:
			s.progress = e.Stats
		case e.Event == simproto.EventDone:
			s.stats = e.Stats
		case e.Event == simproto.EventError:
			s.errMsg = e.Message
		}
		s.mu.Unlock()
		if err == nil && e.Event != simproto.EventRouting && e.Event != simproto.EventAgentRouting && e.Event != simproto.EventProgress {
			select {
			case s.notify <- e:
			default: // the run loop stopped listening
			}
		}
	}
	s.mu.Lock()
	s.readerEnd = sc.Err()
	s.mu.Unlock()
	close(s.notify)
}

// versionWatch is the orchestrator's own watch of the routing ConfigMap:
// the first time each table version appears, with its keys.
type versionWatch struct {
	policy   int
	mu       sync.Mutex
	versions []seenVersion
	seen     map[int64]bool
	changed  chan struct{}
}

func (w *versionWatch) offer(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	at := time.Now()
	var t struct {
		Version int64 `json:"version"`
		Entries []struct {
			Key string `json:"key"`
		} `json:"entries"`
	}
	if json.Unmarshal([]byte(cm.Data[routing.ConfigMapKey]), &t) != nil || t.Version <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[t.Version] {
		return
	}
	w.seen[t.Version] = true
	keys := make([]string, len(t.Entries))
	for i, e := range t.Entries {
		keys[i] = e.Key
	}
	w.versions = append(w.versions, seenVersion{Policy: w.policy, Version: t.Version, At: at, Keys: keys,
		Hot: stateTimes(cm.Data[managerStateKey])})
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *versionWatch) snapshot() []seenVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]seenVersion(nil), w.versions...)
}

// watchRouting starts the orchestrator's watch of policy number k's
// routing ConfigMap (one LIST, then one long WATCH request); changed is
// told of each new version.
func watchRouting(ctx context.Context, kube kubernetes.Interface, ns, policy string, k int, changed chan struct{}) *versionWatch {
	w := &versionWatch{policy: k, seen: map[int64]bool{}, changed: changed}
	lw := toolscache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "configmaps", ns,
		fields.OneTermEqualSelector("metadata.name", routing.ConfigMapName(policy)))
	_, inf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.ConfigMap{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    w.offer,
			UpdateFunc: func(_, obj any) { w.offer(obj) },
		},
	})
	go inf.RunWithContext(ctx)
	return w
}

// procSet tracks the four processes measured. Peak memory is sampled
// while they run (VmHWM), so a process that exits on its own still has one;
