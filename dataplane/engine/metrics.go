package engine

import "github.com/prometheus/client_golang/prometheus"

// metrics counts what the engine does. No label carries a Redis key.
type metrics struct {
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	coalesced      prometheus.Counter
	upstreamReads  prometheus.Counter
	fanout         prometheus.Counter
	upstreamErrors prometheus.Counter
	flushes        prometheus.Counter
	refreshes      prometheus.Counter
	// replicaReads and replicaFallbacks count reads of replicaReads keys
	// answered by a replica, and those a replica failed (then read from
	// the master).
	replicaReads     prometheus.Counter
	replicaFallbacks prometheus.Counter
	shedReads        prometheus.Counter
	shedWrites       prometheus.Counter
	// writeRedirects counts split counters' increments made at another
	// place after theirs provably did not take them (placeAfterFailure).
	writeRedirects prometheus.Counter
	// foldReadRetries counts reads of split keys made again because a
	// fold's move ran between the reads of two places: their snapshots
	// were more than one move apart (foldread.go), or a member split's
	// existence read found no place (memberkeys.go exists).
	foldReadRetries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "heatsink", Subsystem: "engine", Name: name, Help: help})
	}
	m := &metrics{
		cacheHits:        c("cache_hits_total", "Reads of mitigated keys answered from the local cache."),
		cacheMisses:      c("cache_misses_total", "Reads of locally cached keys that went upstream (or joined a read that did)."),
		coalesced:        c("coalesced_total", "Reads that shared another caller's upstream read."),
		upstreamReads:    c("upstream_reads_total", "Upstream reads made for mitigated keys."),
		fanout:           c("fanout_keys_total", "Physical keys (replicas, shards) read or written for mitigated keys."),
		upstreamErrors:   c("upstream_errors_total", "Upstream errors met while serving mitigated keys."),
		flushes:          c("preaggregate_flushes_total", "Pre-aggregated increments written upstream."),
		refreshes:        c("cache_refreshes_total", "Early refreshes of cached keys started ahead of their expiry (each is one coalesced upstream read)."),
		replicaReads:     c("replica_reads_total", "Reads of mitigated keys answered by a Redis replica (replicaReads)."),
		replicaFallbacks: c("replica_fallbacks_total", "Reads from a Redis replica that failed and went to the master instead."),
		shedReads:        c("shed_reads_total", "Reads of shed keys refused over their share of the key's budget (SHED)."),
		shedWrites:       c("shed_writes_total", "Writes of shed keys refused over their share of the key's budget (SHED)."),
		writeRedirects:   c("split_write_redirects_total", "Increments of split counters made at another of the counter's places after theirs failed without applying them (a node down or refusing)."),
		foldReadRetries:  c("fold_read_retries_total", "Reads of split keys made again because a fold's move ran between the reads of two places."),
	}
	if reg != nil {
		for _, col := range []*prometheus.Counter{&m.cacheHits, &m.cacheMisses, &m.coalesced, &m.upstreamReads, &m.fanout, &m.upstreamErrors, &m.flushes, &m.refreshes, &m.replicaReads, &m.replicaFallbacks, &m.shedReads, &m.shedWrites, &m.writeRedirects, &m.foldReadRetries} {
			if err := reg.Register(*col); err != nil {
				// A second engine on the same registerer shares the series.
				if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
					if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
						*col = existing
					}
				}
			}
		}
	}
	return m
}
