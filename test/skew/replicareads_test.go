package skew

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
)

// startReplica starts a redis-server replicating master (replicaof) and
// waits until its link to the master is up: the standalone replica the
// policy's replicaReads.addresses name.
func startReplica(t *testing.T, master *redisproc.Server) *redisproc.Server {
	t.Helper()
	ctx := context.Background()
	r, err := redisproc.Start(ctx, redisproc.Options{ExtraArgs: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	eventually.Succeeds(t, 30*time.Second, func() error {
		info, err := redisproc.Command(r.Addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s of %s: link not up", r.Addr, master.Addr)
		}
		return nil
	})
	return r
}

// checkReplicaReads checks the replica-read move of the read-hot key hot:
// the table sends its reads to the replicas, and in a window of 400 client
// GETs the sidecar reads it from the replica (which only a sidecar
// following the move does: the client and the manager talk to the
// master) at least as often as from the master, and the two serve under
// half of the client's GETs. The local cache in front leaves them the
// cache's misses and refreshes, a few a second, so the window is long
// enough for several. master and replica count the key's GETs on each.
func checkReplicaReads(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane, policy, hot string, master, replica *monitor, gets func() int64) {
	t.Helper()
	eventually.True(t, 60*time.Second, "the table reads "+hot+" from the replicas", func() bool {
		e := entry(t, cp, policy, hot)
		return e != nil && e.ReplicaReads != nil
	})
	eventually.Succeeds(t, 30*time.Second, func() error {
		g0, m0, r0 := gets(), master.count(), replica.count()
		if err := eventually.Poll(ctx, 15*time.Second, func() error {
			if gets()-g0 < 400 {
				return fmt.Errorf("%d GETs", gets()-g0)
			}
			return nil
		}); err != nil {
			return err
		}
		served, m, r := gets()-g0, master.count()-m0, replica.count()-r0
		t.Logf("replica reads of %s: %d client GETs, %d on the master, %d on the replica", hot, served, m, r)
		if r == 0 || m > r || m+r > served/2 {
			return fmt.Errorf("the replica served %d and the master %d of the client's %d GETs of %s: the sidecar does not apply replica reads", r, m, served, hot)
		}
		return nil
	})
}
