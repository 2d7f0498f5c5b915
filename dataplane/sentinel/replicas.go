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

// Lookup asks opts' Sentinels once for the master and its usable replicas
// (sorted), by the rules the sidecar follows: the answer of the highest
// configuration epoch, its master confirmed with ROLE, no answer while a
// failover is in progress, replicas up and linked to their master. The
// manager's samples of a Sentinel target use it, so the two never name
// different masters.
func Lookup(ctx context.Context, opts Options) (master string, replicas []string, err error) {
	f, err := New(opts)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if master, _, _, err = f.resolve(ctx); err != nil {
		return "", nil, fmt.Errorf("sentinel: master %q: %w", opts.MasterName, err)
	}
	if replicas, err = f.Replicas(ctx); err != nil {
		return "", nil, err
	}
	slices.Sort(replicas)
	return master, replicas, nil
}
