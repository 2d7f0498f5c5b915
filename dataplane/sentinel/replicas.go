package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// Replicas asks the Sentinels, one after the other until one answers, for
// the replicas of the master (SENTINEL REPLICAS) and returns the
// addresses of those Sentinel sees up and linked to their master: the
// replicas a reader may read from (the engine's replica reads, which
// measure their lag themselves).
func (f *Follower) Replicas(ctx context.Context) ([]string, error) {
	var errs []error
	for i, s := range f.sentinels {
		cctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
		list, err := s.Replicas(cctx, f.opts.MasterName).Result()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.opts.Addrs[i], err))
			continue
		}
		return usableReplicas(list), nil
	}
	return nil, fmt.Errorf("sentinel: replicas of %q: %w", f.opts.MasterName, errors.Join(errs...))
}

// usableReplicas keeps the replicas of a SENTINEL REPLICAS reply that are
// neither down (subjectively or objectively) nor disconnected, and whose
// link to the master is ok.
func usableReplicas(list []map[string]string) []string {
	var out []string
	for _, r := range list {
		flags := strings.Split(r["flags"], ",")
		if slices.Contains(flags, "s_down") || slices.Contains(flags, "o_down") || slices.Contains(flags, "disconnected") {
			continue
		}
		if r["master-link-status"] != "ok" || r["ip"] == "" || r["port"] == "" {
			continue
		}
		out = append(out, net.JoinHostPort(r["ip"], r["port"]))
	}
	return out
}
