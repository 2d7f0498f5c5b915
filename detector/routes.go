package detector

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/routing/watch"
)

// routes holds the routing tables the manager sent and serves them to the
// node's sidecars:
//
//	GET /routing/v1/<namespace>/<name>?after=<version>[&wait=<duration>][&stream=1]
//
// Without stream, a long poll: 200 with the table (its version in
// X-Heatsink-Routing-Version) as soon as the agent holds one newer than
// after, or 304 once wait (default 30s, at most 5m) passes without one.
// With stream=1, one response that stays open (watch.StreamContentType):
// each newer table as a frame when the agent gets it, and a heartbeat frame
// every wait, so a routing change costs one write per sidecar rather than a
// response and a new request (see serveStream). Only a pod injected for that
// policy may ask (403 otherwise), as for counts. One routing change thus
// costs the API server nothing per pod: the manager pushes it to each node
// agent once, and the agent hands it to the sidecars waiting on it.
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

// RoutingPath is the prefix of the routing server's paths.
const RoutingPath = "/routing/v1/"

// HeaderRoutingVersion carries the served table's version.
const HeaderRoutingVersion = watch.HeaderVersion

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

func (r *routes) handler(d *Detector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, RoutingPath)
		ns, name, ok2 := strings.Cut(rest, "/")
		if req.Method != http.MethodGet || !ok || !ok2 || ns == "" || name == "" || strings.Contains(name, "/") {
			http.Error(w, "GET "+RoutingPath+"<namespace>/<name>?after=<version>", http.StatusNotFound)
			return
		}
		policy := ns + "/" + name
		if v := d.sources.entitled(addrPort(stringAddr(req.RemoteAddr)).Addr(), policy); v != verdictOK {
			d.metrics.routingRequests.WithLabelValues(string(v)).Inc()
			http.Error(w, "this pod may not read the routing of "+policy, http.StatusForbidden)
			return
		}
		after, _ := strconv.ParseInt(req.URL.Query().Get("after"), 10, 64)
		wait := 30 * time.Second
		if s := req.URL.Query().Get("wait"); s != "" {
			if dw, err := time.ParseDuration(s); err == nil && dw >= 0 {
				wait = min(dw, 5*time.Minute)
			}
		}
		d.metrics.routingWaiters.Inc()
		defer d.metrics.routingWaiters.Dec()
		if req.URL.Query().Get("stream") == "1" {
			r.serveStream(d, w, req, policy, after, wait)
			return
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			version, body, changed := r.current(policy)
			if version > after {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set(HeaderRoutingVersion, strconv.FormatInt(version, 10))
				_, _ = w.Write(body)
				d.metrics.routingRequests.WithLabelValues("served").Inc()
				return
			}
			select {
			case <-changed:
			case <-timer.C:
				w.WriteHeader(http.StatusNotModified)
				d.metrics.routingRequests.WithLabelValues("not_modified").Inc()
				return
			case <-req.Context().Done():
				return
			case <-r.closed:
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
	})
}

// serveStream holds a sidecar's routing stream: every table of policy
// newer than after, each as a frame as soon as the agent holds it, and a
// heartbeat frame every wait so that the sidecar can tell a live agent with
// nothing new from a lost connection (watch.AppendFrame has the format).
// Against a long poll, a change costs the agent one write per sidecar
// instead of a response, a new request and its handler: at 1,000 agents
// and 10,000 sidecars in one simulator process, the long polls' churn made
// the last agents wait behind the first ones' sidecars. The pod's right to
// the table is checked again before each frame.
func (r *routes) serveStream(d *Detector, w http.ResponseWriter, req *http.Request, policy string, after int64, wait time.Duration) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	src := addrPort(stringAddr(req.RemoteAddr)).Addr()
	w.Header().Set("Content-Type", watch.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	heartbeat := time.NewTicker(max(wait, time.Second))
	defer heartbeat.Stop()
	var buf []byte
	for {
		version, body, changed := r.current(policy)
		if version > after {
			if d.sources.entitled(src, policy) != verdictOK {
				return
			}
			buf = watch.AppendFrame(buf[:0], version, body)
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
		case <-heartbeat.C:
			if _, err := w.Write(watch.AppendFrame(buf[:0], 0, nil)); err != nil {
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
