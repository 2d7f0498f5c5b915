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
// node's sidecars by long polling:
//
//	GET /routing/v1/<namespace>/<name>?after=<version>[&wait=<duration>]
//
// answers 200 with the table (its version in X-Heatsink-Routing-Version) as
// soon as the agent holds one newer than after, or 304 once wait (default
// 30s, at most 5m) passes without one. Only a pod injected for that policy
// may ask (403 otherwise), as for counts. One routing change thus costs the
// API server nothing per pod: the manager pushes it to each node agent once,
// and the agent hands it to the sidecars waiting on it.
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

// stringAddr adapts "ip:port" to net.Addr for addrPort.
type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }
