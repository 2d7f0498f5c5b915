package proxy

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strconv"
	"strings"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// The sidecar as a one-node cluster.
//
// A cluster-aware client (go-redis ClusterClient, redis-py RedisCluster,
// ioredis Cluster, ...) asks its seed for the cluster's topology and then
// connects to the masters it is told about. Were the real topology
// forwarded, the client would leave the sidecar after its first command,
// and every hot key it touches would go unseen and unmitigated. So the
// sidecar answers the topology commands itself, whether Redis behind it is
// standalone or a cluster: one master, at the address the client connected
// to (the local address of its connection, so it holds on any port and
// interface), owning every slot. The proxy routes each command to the
// right master and follows MOVED and ASK itself (session_redirect.go,
// loop_upstream_linux.go), so the client never meets a redirection either.
//
// READONLY, READWRITE and ASKING are answered +OK: the proxy reads from
// masters only, and an ASKING forwarded on a shared connection would apply
// to another client's command. INFO, in standalone mode, reports
// cluster_enabled:1, since redis-py checks it before CLUSTER SLOTS
// (patchClusterEnabled). The formats are Redis 7.0's, byte for byte, for a
// lone master; what is local is documented in docs/proxy.md.

// topologySubs are the CLUSTER subcommands answered by the sidecar, with
// their arity (CLUSTER and the subcommand included).
var topologySubs = map[string]int{
	"SLOTS": 2, "SHARDS": 2, "NODES": 2, "INFO": 2, "MYID": 2, "MYSHARDID": 2,
	"LINKS": 2, "KEYSLOT": 3, "REPLICAS": 3, "SLAVES": 3,
}

// isTopology reports a command answered by topologyReply.
func isTopology(args [][]byte) bool {
	if len(args) == 1 {
		return eqFold(args[0], "READONLY") || eqFold(args[0], "READWRITE") || eqFold(args[0], "ASKING")
	}
	if !eqFold(args[0], "CLUSTER") {
		return false
	}
	_, ok := topologySubs[command.Upper(args[1])]
	return ok
}

// clusterSelf is the one node the sidecar presents: its address as the
// client sees it, and ids derived from it (stable across restarts, and
// distinct for two sidecars on distinct addresses).
type clusterSelf struct {
	ip      string
	port    int
	id      string
	shardID string
}

func newClusterSelf(local net.Addr) clusterSelf {
	s := clusterSelf{}
	if a, ok := local.(*net.TCPAddr); ok {
		s.ip, s.port = a.IP.String(), a.Port
		if v4 := a.IP.To4(); v4 != nil {
			s.ip = v4.String()
		}
	}
	addr := net.JoinHostPort(s.ip, strconv.Itoa(s.port))
	id := sha1.Sum([]byte("heatsink sidecar node " + addr))
	shard := sha1.Sum([]byte("heatsink sidecar shard " + addr))
	s.id, s.shardID = hex.EncodeToString(id[:]), hex.EncodeToString(shard[:])
	return s
}

// topologyReply answers a command isTopology accepted, for a client of
// protocol proto connected to local.
func topologyReply(args [][]byte, local net.Addr, proto int) []byte {
	if len(args) == 1 {
		return resp.AppendStatus(nil, "OK") // READONLY, READWRITE, ASKING
	}
	sub := command.Upper(args[1])
	if len(args) != topologySubs[sub] {
		return resp.AppendError(nil, "ERR wrong number of arguments for 'cluster|"+strings.ToLower(sub)+"' command")
	}
	me := newClusterSelf(local)
	var b []byte
	switch sub {
	case "SLOTS":
		// [[0, 16383, [ip, port, id, {}]]]
		b = resp.AppendArrayHeader(b, 1)
		b = resp.AppendArrayHeader(b, 3)
		b = resp.AppendInt(b, 0)
		b = resp.AppendInt(b, 16383)
		b = resp.AppendArrayHeader(b, 4)
		b = resp.AppendBulkString(b, me.ip)
		b = resp.AppendInt(b, int64(me.port))
		b = resp.AppendBulkString(b, me.id)
		b = appendMapHeader(b, 0, proto)
	case "SHARDS":
		b = resp.AppendArrayHeader(b, 1)
		b = appendMapHeader(b, 2, proto)
		b = resp.AppendBulkString(b, "slots")
		b = resp.AppendArrayHeader(b, 2)
		b = resp.AppendInt(b, 0)
		b = resp.AppendInt(b, 16383)
		b = resp.AppendBulkString(b, "nodes")
		b = resp.AppendArrayHeader(b, 1)
		b = appendMapHeader(b, 7, proto)
		b = resp.AppendBulkString(b, "id")
		b = resp.AppendBulkString(b, me.id)
		b = resp.AppendBulkString(b, "port")
		b = resp.AppendInt(b, int64(me.port))
		b = resp.AppendBulkString(b, "ip")
		b = resp.AppendBulkString(b, me.ip)
		b = resp.AppendBulkString(b, "endpoint")
		b = resp.AppendBulkString(b, me.ip)
		b = resp.AppendBulkString(b, "role")
		b = resp.AppendBulkString(b, "master")
		b = resp.AppendBulkString(b, "replication-offset")
		b = resp.AppendInt(b, 0)
		b = resp.AppendBulkString(b, "health")
		b = resp.AppendBulkString(b, "online")
	case "NODES":
		// No cluster bus: its port is 0. Redis writes an IPv6 address
		// unbracketed; clients split ip:port at the last colon.
		line := me.id + " " + me.ip + ":" + strconv.Itoa(me.port) + "@0 myself,master - 0 0 0 connected 0-16383\n"
		b = appendText(b, line, proto)
	case "INFO":
		b = appendText(b, clusterInfo, proto)
	case "MYID":
		b = resp.AppendBulkString(b, me.id)
	case "MYSHARDID":
		b = resp.AppendBulkString(b, me.shardID)
	case "LINKS":
		b = resp.AppendArrayHeader(b, 0) // no other node to link to
	case "KEYSLOT":
		b = resp.AppendInt(b, int64(slotOf(args[2])))
	case "REPLICAS", "SLAVES":
		if string(args[2]) != me.id {
			return resp.AppendError(nil, "ERR Unknown node "+string(args[2]))
		}
		b = resp.AppendArrayHeader(b, 0) // the sidecar names no replica
	}
	return b
}

// clusterInfo is CLUSTER INFO of a healthy one-master cluster. The state is
// "ok" whatever the real cluster's: the proxy passes Redis' own CLUSTERDOWN
// errors on, command by command.
const clusterInfo = "cluster_state:ok\r\n" +
	"cluster_slots_assigned:16384\r\n" +
	"cluster_slots_ok:16384\r\n" +
	"cluster_slots_pfail:0\r\n" +
	"cluster_slots_fail:0\r\n" +
	"cluster_known_nodes:1\r\n" +
	"cluster_size:1\r\n" +
	"cluster_current_epoch:0\r\n" +
	"cluster_my_epoch:0\r\n" +
	"cluster_stats_messages_sent:0\r\n" +
	"cluster_stats_messages_received:0\r\n" +
	"total_cluster_links_buffer_limit_exceeded:0\r\n"

// appendMapHeader starts a map of n pairs: a RESP3 map, or in RESP2 an
// array of 2n elements, as Redis sends it.
func appendMapHeader(b []byte, n, proto int) []byte {
	if proto == 3 {
		b = append(b, '%')
		b = strconv.AppendInt(b, int64(n), 10)
		return append(b, '\r', '\n')
	}
	return resp.AppendArrayHeader(b, 2*n)
}

// appendText appends a text reply: a RESP3 verbatim string (txt), or in
// RESP2 a bulk string, as Redis sends CLUSTER NODES and INFO.
func appendText(b []byte, s string, proto int) []byte {
	if proto != 3 {
		return resp.AppendBulkString(b, s)
	}
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(s)+4), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// isInfo reports INFO, whose reply the proxy adjusts (infoReply).
func isInfo(args [][]byte) bool { return eqFold(args[0], "INFO") }

// patchClusterEnabled turns a standalone Redis' INFO reply, in place, into
// a cluster node's: cluster_enabled:0 becomes 1. The length is unchanged,
// so the reply's framing (bulk or verbatim) holds. redis-py's RedisCluster
// refuses a seed whose INFO says 0; any other reply (an error, a QUEUED
// inside MULTI) holds no such line and is left as it is.
func patchClusterEnabled(b []byte) []byte {
	const line = "\ncluster_enabled:0\r"
	if i := bytes.Index(b, []byte(line)); i >= 0 {
		b[i+len(line)-2] = '1'
	}
	return b
}

// info forwards INFO and writes its reply adjusted (infoReply), in order
// with the client's other replies.
func (s *session) info() {
	quiet := s.quiet
	out := s.infoReply(s.cmd.Raw, s.cmd.Args)
	if !quiet {
		s.cw.Buf = append(s.cw.Buf, out...)
	}
}

// infoReply is the proxy's answer to INFO (raw, its arguments args). In
// standalone mode, Redis' reply patched to say cluster_enabled:1
// (patchClusterEnabled). In cluster mode the first master's reply, with
// the Keyspace section, when it has one, merged from every master's as
// INFO keyspace is (spliceKeyspace): the keyspace is the whole cluster's,
// the other sections (memory, clients, stats, ...) that node's.
func (s *session) infoReply(raw []byte, args [][]byte) []byte {
	if !s.p.cfg.Cluster || !infoHasKeyspace(args) {
		rs := s.roundTripNodes([][]byte{append([]byte(nil), raw...)}, []int{0})
		if len(rs) != 1 {
			return resp.AppendError(nil, errConnectionLost)
		}
		if s.p.cfg.Cluster {
			return rs[0].Raw
		}
		return patchClusterEnabled(rs[0].Raw)
	}
	masters := s.p.topo.masters()
	cmds, nodes := [][]byte{append([]byte(nil), raw...)}, []int{0}
	keyspace := resp.AppendArgs(nil, [][]byte{[]byte("INFO"), []byte("keyspace")})
	for _, n := range masters {
		cmds, nodes = append(cmds, keyspace), append(nodes, n)
	}
	rs := s.roundTripNodes(cmds, nodes)
	if len(rs) != len(cmds) {
		return resp.AppendError(nil, errConnectionLost)
	}
	keyspaces := make([][]byte, len(masters))
	for i := range masters {
		keyspaces[i] = rs[i+1].Raw
	}
	return spliceKeyspace(rs[0].Raw, keyspaces)
}

// slotArgNode is the master serving the slot CLUSTER COUNTKEYSINSLOT or
// GETKEYSINSLOT names (cluster mode), so that they count that slot's keys
// where they are; 0 (the first master) for any other command and for a
// malformed slot, which Redis then refuses itself.
func (p *Proxy) slotArgNode(args [][]byte) int {
	if len(args) < 3 || !eqFold(args[0], "CLUSTER") || !(eqFold(args[1], "COUNTKEYSINSLOT") || eqFold(args[1], "GETKEYSINSLOT")) {
		return 0
	}
	slot, err := strconv.Atoi(string(args[2]))
	if err != nil || slot < 0 || slot > 16383 {
		return 0
	}
	return p.topo.nodeOf(uint16(slot))
}
