package sidecar

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/heatsink-dev/heatsink/injectlink"
)

// InjectedMemoryLimit is the memory limit the injector gives the sidecar's
// container unless configured (injectlink.MemoryLimit, which
// webhook.DefaultProxyResources uses). docs/proxy.md, Memory defaults, has
// the one table of the defaults derived from it.
const InjectedMemoryLimit = injectlink.MemoryLimit

// DefaultMaxMemory is the memory ceiling when none is configured: 75 % of
// the container's memory limit (the cgroup's), leaving headroom for what
// Go's runtime and the kernel hold outside the heap, or 75 % of
// InjectedMemoryLimit (192 MiB) when the process has no limit. A quarter
// of it bounds what the proxy buffers for clients (Config.MaxMemory).
// Large values do not count against it: they are streamed (proxy,
// bigvalue.go), so --max-bulk stays Redis' 512 MiB whatever the limit.
func DefaultMaxMemory() int64 {
	limit := cgroupMemoryLimit()
	if limit <= 0 {
		limit = InjectedMemoryLimit
	}
	return limit / 4 * 3
}

// cgroupMemoryLimit is the memory limit of the process's cgroup (v2, then
// v1), 0 when there is none.
func cgroupMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		return parseLimit(string(b))
	}
	return 0
}

// parseLimit reads a cgroup memory limit file: "max" (v2) or a huge
// number (v1, no limit) mean none.
func parseLimit(s string) int64 {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}

// ParseMemory reads a memory ceiling: a byte count or a Kubernetes
// quantity ("192Mi"); empty means DefaultMaxMemory.
func ParseMemory(s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultMaxMemory(), nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	n := q.Value()
	if n < 16<<20 {
		return 0, fmt.Errorf("%q: want at least 16Mi", s)
	}
	return n, nil
}

// trimIdle is how much free heap (memory Go holds but no longer uses) the
// sidecar keeps before giving it back to the system.
const trimIdle = 16 << 20

// returnMemory gives memory freed after a burst (deep pipelines, slow
// clients, large replies) back to the system every few seconds, instead of
// leaving it to Go's background scavenger, which returns it slowly while
// the heap is far below its limit: a sidecar's memory then comes back down
// once the burst is over.
func returnMemory(ctx context.Context, every time.Duration) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > trimIdle {
			debug.FreeOSMemory()
		}
	}
}
