package proxy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing/command"
)

func TestDecide(t *testing.T) {
	shared := mode{shared: true, proto: 2}
	own := mode{proto: 2}
	sharedCluster := mode{shared: true, cluster: true, proto: 2}
	ownCluster := mode{cluster: true, proto: 3}
	for name, tc := range map[string]struct {
		cmd  string
		mode mode
		want route
	}{
		"plain read, shared":              {"GET k", shared, route{op: opForward}},
		"plain write, own connection":     {"SET k v", own, route{op: opForward}},
		"keyless, shared":                 {"PING", shared, route{op: opForward}},
		"unknown command needs its own":   {"NOSUCH x", shared, route{op: opOwnConn}},
		"unknown command, own connection": {"NOSUCH x", own, route{op: opForward}},
		"SELECT needs its own":            {"SELECT 1", shared, route{op: opOwnConn}},
		"SELECT on its own is state":      {"SELECT 1", own, route{op: opState}},
		"AUTH is state":                   {"AUTH u p", own, route{op: opState}},
		"MULTI needs its own":             {"MULTI", shared, route{op: opOwnConn}},
		"MULTI on its own is forwarded":   {"MULTI", own, route{op: opForward}},
		"WATCH needs its own":             {"WATCH k", shared, route{op: opOwnConn}},
		"BLPOP gets one of its own":       {"BLPOP q 0", shared, route{op: opExclusive}},
		"BLPOP on its own connection":     {"BLPOP q 0", own, route{op: opForward}},
		"BZMPOP gets one of its own":      {"BZMPOP 0 1 z MIN", shared, route{op: opExclusive}},
		"XREAD BLOCK gets one of its own": {"XREAD BLOCK 0 STREAMS s 0", shared, route{op: opExclusive}},
		"XREAD without BLOCK is shared":   {"XREAD STREAMS s 0", shared, route{op: opForward}},
		"WAIT needs its own":              {"WAIT 1 0", shared, route{op: opOwnConn}},
		"WAIT on its own is the proxy's":  {"WAIT 1 0", own, route{op: opWait}},
		"WAITAOF in a cluster":            {"waitaof 0 1 0", ownCluster, route{op: opWait}},
		"WAIT in MULTI is queued":         {"WAIT 1 0", mode{inTx: true}, route{op: opForward}},
		"EVAL gets one of its own":        {"EVAL s 0", shared, route{op: opExclusive}},
		"FCALL_RO gets one of its own":    {"FCALL_RO f 0", shared, route{op: opExclusive}},
		"SCRIPT KILL is shared":           {"SCRIPT KILL", shared, route{op: opForward}},
		"SUBSCRIBE needs its own":         {"SUBSCRIBE a", shared, route{op: opOwnConn}},
		"UNSUBSCRIBE needs its own":       {"UNSUBSCRIBE a b c", shared, route{op: opOwnConn}},
		"UNSUBSCRIBE is forwarded":        {"UNSUBSCRIBE", own, route{op: opForward}},
		"PUNSUBSCRIBE is forwarded":       {"PUNSUBSCRIBE p*", own, route{op: opForward}},
		"SUNSUBSCRIBE is forwarded":       {"SUNSUBSCRIBE", ownCluster, route{op: opForward}},
		"SCRIPT LOAD standalone":          {"SCRIPT LOAD x", shared, route{op: opForward}},
		"SCRIPT LOAD in a cluster loop":   {"SCRIPT LOAD x", sharedCluster, route{op: opOwnConn}},
		"SCRIPT KILL fans out":            {"script kill", ownCluster, route{op: opFanout}},
		"FUNCTION LOAD fans out":          {"FUNCTION LOAD x", ownCluster, route{op: opFanout}},
		"FUNCTION LIST does not":          {"FUNCTION LIST", ownCluster, route{op: opForward}},
		"SUBSCRIBE becomes a pipe":        {"subscribe a", own, route{op: opPipe}},
		"SSUBSCRIBE becomes a pipe":       {"SSUBSCRIBE a", ownCluster, route{op: opPipe}},
		"MONITOR becomes a pipe":          {"MONITOR", own, route{op: opPipe}},
		"CLIENT SETNAME needs its own":    {"CLIENT SETNAME x", shared, route{op: opOwnConn}},
		"CLIENT SETINFO sent shared":      {"CLIENT SETINFO LIB-NAME x", shared, route{op: opForward}},
		"CLIENT REPLY needs its own":      {"CLIENT REPLY OFF", shared, route{op: opOwnConn}},
		"CLIENT REPLY OFF":                {"client reply off", own, route{op: opReplyMode}},
		"CLIENT REPLY SKIP":               {"CLIENT REPLY SKIP", ownCluster, route{op: opReplyMode}},
		"CLIENT REPLY malformed":          {"CLIENT REPLY MAYBE", own, route{op: opForward}},
		"CLIENT KILL needs its own":       {"CLIENT KILL ID 7", shared, route{op: opOwnConn}},
		"CLIENT KILL on its own":          {"client kill 127.0.0.1:1", own, route{op: opClientKill}},
		"CLIENT KILL in a cluster":        {"CLIENT KILL ID 7 SKIPME no", ownCluster, route{op: opClientKill}},
		"CLIENT KILL alone to Redis":      {"CLIENT KILL", own, route{op: opForward}},
		"CLIENT SETINFO on its own":       {"CLIENT SETINFO LIB-NAME x", own, route{op: opForward}},
		"CLIENT SETINFO malformed":        {"CLIENT SETINFO LIB-NAME", shared, route{op: opOwnConn}},
		"HELLO alone keeps the protocol":  {"HELLO", mode{shared: true, proto: 3}, route{op: opHello, proto: 3}},
		"HELLO 3 answered when shared":    {"HELLO 3", shared, route{op: opHello, proto: 3}},
		"HELLO 3 in a cluster loop":       {"HELLO 3", sharedCluster, route{op: opHello, proto: 3}},
		"HELLO with AUTH needs its own":   {"HELLO 3 AUTH u p", shared, route{op: opOwnConn}},
		"HELLO 4 needs its own":           {"HELLO 4", shared, route{op: opOwnConn}},
		"HELLO on its own is state":       {"HELLO 3", own, route{op: opState}},
		"CLUSTER SLOTS is answered":       {"cluster slots", shared, route{op: opTopology}},
		"CLUSTER SHARDS in a cluster":     {"CLUSTER SHARDS", ownCluster, route{op: opTopology}},
		"READONLY is answered":            {"READONLY", sharedCluster, route{op: opTopology}},
		"ASKING is answered":              {"ASKING", own, route{op: opTopology}},
		"CLUSTER COUNTKEYSINSLOT is not":  {"CLUSTER COUNTKEYSINSLOT 1", own, route{op: opForward}},
		"CLUSTER SLOTS queued in MULTI":   {"CLUSTER SLOTS", mode{cluster: true, inTx: true}, route{op: opForward}},
		"INFO standalone is patched":      {"INFO", shared, route{op: opInfo}},
		"INFO in a cluster is merged":     {"INFO", ownCluster, route{op: opInfo}},
		"INFO in a cluster loop":          {"INFO memory", sharedCluster, route{op: opInfo}},
		"INFO in a cluster MULTI":         {"INFO", mode{cluster: true, inTx: true}, route{op: opForward}},
		"QUIT":                            {"quit", shared, route{op: opQuit}},
		"QUIT on its own":                 {"QUIT", ownCluster, route{op: opQuit}},
		"KEYS standalone is shared":       {"KEYS *", shared, route{op: opForward}},
		"KEYS in a cluster loop":          {"KEYS *", sharedCluster, route{op: opOwnConn}},
		"KEYS in a cluster session":       {"keys *", ownCluster, route{op: opNodeWide}},
		"FLUSHALL in a cluster session":   {"FLUSHALL ASYNC", ownCluster, route{op: opNodeWide}},
		"SCAN in a cluster session":       {"SCAN 0 MATCH a* COUNT 5", ownCluster, route{op: opNodeWide}},
		"INFO keyspace in a cluster":      {"INFO keyspace", ownCluster, route{op: opNodeWide}},
		"INFO keyspace standalone":        {"INFO keyspace", shared, route{op: opInfo}},
		"DBSIZE in a cluster MULTI":       {"DBSIZE", mode{cluster: true, proto: 2, inTx: true}, route{op: opRefuse, err: refuseNodeWideInTx([]byte("DBSIZE"))}},
		"SWAPDB in a cluster":             {"SWAPDB 0 1", ownCluster, route{op: opRefuse, err: refuseClusterWide([]byte("SWAPDB"))}},
		"SYNC":                            {"sync", shared, route{op: opRefuse, err: refuseReplication([]byte("SYNC"))}},
		"PSYNC on its own":                {"PSYNC ? -1", own, route{op: opRefuse, err: refuseReplication([]byte("PSYNC"))}},
		"MAINT_NOTIFICATIONS shared":      {"CLIENT MAINT_NOTIFICATIONS ON", shared, route{op: opRefuse, err: refuseMaintNotifications}},
		"MAINT_NOTIFICATIONS own":         {"client maint_notifications on", own, route{op: opRefuse, err: refuseMaintNotifications}},
	} {
		t.Run(name, func(t *testing.T) {
			var args [][]byte
			for _, f := range strings.Fields(tc.cmd) {
				args = append(args, []byte(f))
			}
			c, known := command.Lookup(args[0])
			got := decide(c, known, args, tc.mode)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(route{})); diff != "" {
				t.Errorf("decide(%q) (-want +got):\n%s", tc.cmd, diff)
			}
		})
	}
}

// TestRefusalsNameTheCommand checks the refusal texts the docs list.
func TestRefusalsNameTheCommand(t *testing.T) {
	for name, tc := range map[string]struct{ got, want string }{
		"replication": {refuseReplication([]byte("psync")), "ERR heatsink proxy: PSYNC is not supported through the proxy (it turns the connection into a replication stream)"},
		"cluster":     {refuseClusterWide([]byte("scan")), "ERR heatsink proxy: SCAN acts on every node of a cluster; run it against each node directly"},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
