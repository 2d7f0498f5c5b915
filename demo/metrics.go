package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// EngineCounts are the routing engines' counters summed over the sidecars
// (their /metrics): what the mitigations did for reads of mitigated keys.
type EngineCounts struct {
	// CacheHits are reads answered from a sidecar's local cache.
	CacheHits float64
	// Coalesced are reads that shared another caller's upstream read.
	Coalesced float64
	// UpstreamReads are the reads of mitigated keys that went to Redis.
	UpstreamReads float64
	// CacheMisses are reads of cached keys that found no fresh value and
	// waited for Redis; Refreshes the early refreshes ahead of expiry, each
	// of which spared the readers of an expiring key that wait.
	CacheMisses, Refreshes float64
}

// Saved is the reads of mitigated keys that never reached Redis.
func (e EngineCounts) Saved() float64 { return e.CacheHits + e.Coalesced }

// parseEngineMetrics sums the engine counters of a Prometheus text
// exposition into c.
func parseEngineMetrics(r io.Reader, c *EngineCounts) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var dst *float64
		switch name {
		case "heatsink_engine_cache_hits_total":
			dst = &c.CacheHits
		case "heatsink_engine_coalesced_total":
			dst = &c.Coalesced
		case "heatsink_engine_upstream_reads_total":
			dst = &c.UpstreamReads
		case "heatsink_engine_cache_misses_total":
			dst = &c.CacheMisses
		case "heatsink_engine_cache_refreshes_total":
			dst = &c.Refreshes
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return fmt.Errorf("metric %s: %w", name, err)
		}
		*dst += v
	}
	return sc.Err()
}

// scrapeEngines reads and sums the engine counters of every sidecar.
func scrapeEngines(ctx context.Context, urls []string) (EngineCounts, error) {
	var c EngineCounts
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return c, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return c, err
		}
		err = parseEngineMetrics(resp.Body, &c)
		resp.Body.Close()
		if err != nil {
			return c, fmt.Errorf("%s: %w", u, err)
		}
	}
	return c, nil
}
