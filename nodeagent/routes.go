package nodeagent

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// routes holds the routing tables the manager sent and streams them to the
// node's sidecars (sidecarlink.RoutingRequest has the request,
// sidecarlink.AppendFrame the frames): each newer table as a frame when
// the agent gets it, and a heartbeat frame while nothing changes, so a
// routing change costs one write per sidecar (see serveStream). Only a pod
// injected for that policy may ask (403 otherwise), as for counts. One
// routing change thus costs the API server nothing per pod: the manager
// pushes it to each node agent once, and the agent hands it to the
// sidecars waiting on it.
type routes struct {
	mu     sync.Mutex
	tables map[string]*table
	closed chan struct{}
}

type table struct {
	version int64
	body    []byte
	// changed is closed, and replaced, when a newer table arrives.
	changed chan struct{}
}

func newRoutes() *routes {
	return &routes{tables: map[string]*table{}, closed: make(chan struct{})}
}

func (r *routes) entry(policy string) *table {
	t := r.tables[policy]
	if t == nil {
		t = &table{changed: make(chan struct{})}
		r.tables[policy] = t
	}
	return t
}

// update keeps body as policy's table if it is newer than the one held,
// and reports whether it did.
func (r *routes) update(policy string, version int64, body []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.entry(policy)
	if version <= t.version {
		return false
	}
	t.version, t.body = version, body
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// remove forgets a deleted policy's table.
func (r *routes) remove(policy string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.tables[policy]; t != nil {
		close(t.changed)
		delete(r.tables, policy)
	}
}

// keepOnly forgets the tables of policies not in keep.
func (r *routes) keepOnly(keep map[string]bool) {
	r.mu.Lock()
	var drop []string
	for p := range r.tables {
		if !keep[p] {
			drop = append(drop, p)
		}
	}
	r.mu.Unlock()
	for _, p := range drop {
		r.remove(p)
	}
}

// closeAll releases every waiting request (shutdown).
func (r *routes) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.closed:
	default:
		close(r.closed)
	}
}

// current returns policy's table and the channel closed when it changes.
func (r *routes) current(policy string) (version int64, body []byte, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.entry(policy)
	return t.version, t.body, t.changed
}

func (r *routes) handler(d *Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rr, err := sidecarlink.ParseRoutingRequest(req.URL)
		if req.Method != http.MethodGet || err != nil {
			http.Error(w, sidecarlink.ErrRoutingRequest.Error(), http.StatusNotFound)
			return
		}
		policy := rr.Policy()
		if v := d.sources.entitled(addrPort(stringAddr(req.RemoteAddr)).Addr(), policy); v != verdictOK {
			d.metrics.routingRequests.WithLabelValues(string(v)).Inc()
			http.Error(w, "this pod may not read the routing of "+policy, http.StatusForbidden)
			return
		}
		d.metrics.routingWaiters.Inc()
		defer d.metrics.routingWaiters.Dec()
		r.serveStream(d, w, req, policy, rr.After, rr.Heartbeat)
	})
}

// serveStream holds a sidecar's routing stream: every table of policy
// newer than after, each as a frame as soon as the agent holds it, and a
// heartbeat frame every heartbeat so that the sidecar can tell a live agent
// with nothing new from a lost connection. A stream rather than a request
// per table: a change then costs the agent one write per sidecar instead
// of a response, a new request and its handler; at 1,000 agents and 10,000
// sidecars in one simulator process, that churn made the last agents wait
// behind the first ones' sidecars. The pod's right to the table is checked
// again before each frame.
func (r *routes) serveStream(d *Agent, w http.ResponseWriter, req *http.Request, policy string, after int64, heartbeat time.Duration) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	src := addrPort(stringAddr(req.RemoteAddr)).Addr()
	w.Header().Set("Content-Type", sidecarlink.StreamContentType)
	// The counts version this agent reads, so that a sidecar of a later
	// release writes one the agent accepts (sidecarlink.AgentCountsVersion).
	w.Header().Set(sidecarlink.CountsVersionHeader, strconv.Itoa(sidecarlink.CountsVersion))
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	var buf []byte
	for {
		version, body, changed := r.current(policy)
		if version > after {
			if d.sources.entitled(src, policy) != verdictOK {
				return
			}
			buf = sidecarlink.AppendFrame(buf[:0], version, body)
			if _, err := w.Write(buf); err != nil {
				return
			}
			flusher.Flush()
			after = version
			d.metrics.routingRequests.WithLabelValues("served").Inc()
			continue
		}
		select {
		case <-changed:
		case <-tick.C:
			if _, err := w.Write(sidecarlink.AppendFrame(buf[:0], 0, nil)); err != nil {
				return
			}
			flusher.Flush()
		case <-req.Context().Done():
			return
		case <-r.closed:
			return
		}
	}
}

// stringAddr adapts "ip:port" to net.Addr for addrPort.
type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }
