package proxy_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// ownConn is the id and addr CLIENT INFO gives a connection (through the
// proxy: its own upstream connection's).
func ownConn(t *testing.T, rc *rawClient) (id, addr string) {
	t.Helper()
	f := ownFields(t, rc)
	return f["id"], f["addr"]
}

// ownFields is every field of the connection's CLIENT INFO.
func ownFields(t *testing.T, rc *rawClient) map[string]string {
	t.Helper()
	info, _ := rc.must("CLIENT", "INFO").([]byte)
	info = bytes.TrimPrefix(info, []byte("txt:"))
	fields := map[string]string{}
	for _, f := range bytes.Fields(info) {
		k, v, _ := strings.Cut(string(f), "=")
		fields[k] = v
	}
	if fields["id"] == "" || fields["addr"] == "" {
		t.Fatalf("CLIENT INFO = %q", info)
	}
	return fields
}

// killForms are the CLIENT KILL invocations that name only the caller's
// own connection, or none, or are malformed: Redis' replies must come
// through the proxy unchanged. $ID and $ADDR stand for the caller's own.
var killForms = [][]string{
	{"CLIENT", "KILL", "1.1.1.1:1111"},
	{"CLIENT", "KILL", "ID", "$ID"},
	{"CLIENT", "KILL", "ID", "$ID", "SKIPME", "yes"},
	{"CLIENT", "KILL", "ID", "$ID", "TYPE", "pubsub", "SKIPME", "no"},
	{"CLIENT", "KILL", "ID", "$ID", "SKIPME", "no"},
	{"CLIENT", "KILL", "ADDR", "$ADDR", "SKIPME", "no"},
	{"CLIENT", "KILL", "ADDR", "$ADDR", "ID", "$ID", "TYPE", "normal", "SKIPME", "NO"},
	{"CLIENT", "KILL", "ADDR", "$ADDR"},
	{"CLIENT", "KILL", "$ADDR"},
	{"client", "kill", "id", "999999999"},
	{"CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "no"},
	{"CLIENT", "KILL", "ID", "999999999", "TYPE", "normal"},
	{"CLIENT", "KILL", "TYPE", "greg"},
	{"CLIENT", "KILL", "ID", "0"},
	{"CLIENT", "KILL", "ID", "abc"},
	{"CLIENT", "KILL", "ID", "5", "SKIPME"},
	{"CLIENT", "KILL", "TYPE", "normal", "SKIPME"},
	{"CLIENT", "KILL", "SKIPME", "maybe"},
	{"CLIENT", "KILL", "USER", "nosuchuser"},
	{"CLIENT", "KILL", "NOSUCHFILTER", "x"},
	{"CLIENT", "KILL"},
	// Filters without ID or ADDR that match no connection, or the
	// caller's alone ($LADDR: the laddr its CLIENT INFO shows; $DIALED:
	// the address it connected to, the proxy's when through it).
	{"CLIENT", "KILL", "TYPE", "master"},
	{"CLIENT", "KILL", "TYPE", "replica", "SKIPME", "no"},
	{"CLIENT", "KILL", "TYPE", "slave"},
	{"CLIENT", "KILL", "TYPE", "pubsub", "USER", "default"},
	{"CLIENT", "KILL", "LADDR", "1.2.3.4:5"},
	{"CLIENT", "KILL", "USER", "idle"},
	{"CLIENT", "KILL", "USER", "idle", "TYPE", "normal", "SKIPME", "no"},
	{"CLIENT", "KILL", "MAXAGE", "100"},
	{"CLIENT", "KILL", "LADDR", "$LADDR", "ID", "$ID", "SKIPME", "no"},
	{"CLIENT", "KILL", "LADDR", "$DIALED", "ADDR", "$ADDR", "SKIPME", "no"},
	{"CLIENT", "KILL", "USER", "default", "TYPE", "normal", "ID", "$ID", "SKIPME", "no"},
	{"CLIENT", "KILL", "USER", "idle", "ID", "$ID", "SKIPME", "no"},
}

// killOutcome runs one form on a fresh connection to addr: its reply, and
// whether the connection still answers PING afterwards.
func killOutcome(t *testing.T, addr string, proto int, form []string) string {
	rc := dialRaw(t, addr)
	if proto == 3 {
		rc.must("HELLO", "3")
	}
	own := ownFields(t, rc)
	args := make([]string, len(form))
	for i, a := range form {
		args[i] = strings.NewReplacer("$ID", own["id"], "$ADDR", own["addr"], "$LADDR", own["laddr"], "$DIALED", addr).Replace(a)
	}
	v, err := rc.do(args...)
	if err != nil {
		return fmt.Sprintf("read error %v", err)
	}
	if b, ok := v.([]byte); ok {
		v = string(b)
	}
	_, perr := rc.do("PING")
	return fmt.Sprintf("%#v alive=%v", v, perr == nil)
}

func TestClientKillOwnConnectionLikeRedis(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	// A user with no connection: USER idle matches nothing.
	dialRaw(t, srv.Addr).must("ACL", "SETUSER", "idle", "on", "nopass")
	for _, proto := range []int{2, 3} {
		for _, form := range killForms {
			want := killOutcome(t, srv.Addr, proto, form)
			got := killOutcome(t, addr, proto, form)
			if got != want {
				t.Errorf("RESP%d %v: through the proxy %s, direct %s", proto, form, got, want)
			}
		}
	}
}

// TestClientKillOfOthersRefused: a kill that could match another client's
// connection, or one of the proxy's shared connections, is refused, and
// that connection lives on.
func TestClientKillOfOthersRefused(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	other := dialRaw(t, addr)
	otherID, otherAddr := ownConn(t, other)
	direct := dialRaw(t, srv.Addr)
	directID, directAddr := ownConn(t, direct)
	const refusal = "ERR heatsink proxy: CLIENT KILL through the proxy may match only the client's own connection, and these filters match another connection on Redis (CLIENT LIST); run it against Redis directly"
	for _, form := range [][]string{
		{"CLIENT", "KILL", "ID", otherID},
		{"CLIENT", "KILL", "ID", directID, "SKIPME", "no"},
		{"CLIENT", "KILL", "ADDR", otherAddr},
		{"CLIENT", "KILL", otherAddr},
		{"CLIENT", "KILL", directAddr},
		{"CLIENT", "KILL", "TYPE", "normal"},
		{"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no"},
		{"CLIENT", "KILL", "USER", "default"},
		{"CLIENT", "KILL", "LADDR", srv.Addr},
		{"CLIENT", "KILL", "LADDR", addr}, // the proxy's address: every client of it
		{"CLIENT", "KILL", "TYPE", "normal", "USER", "default", "SKIPME", "yes"},
		{"CLIENT", "KILL", "TYPE", "normal", "LADDR", srv.Addr, "USER", "default"},
	} {
		rc := dialRaw(t, addr)
		v, err := rc.do(form...)
		if diff := cmp.Diff(any(resp.Error(refusal)), v); err != nil || diff != "" {
			t.Errorf("%v: %v (-want +got):\n%s", form, err, diff)
		}
		if _, err := rc.do("PING"); err != nil {
			t.Errorf("%v: the refused client's connection: %v", form, err)
		}
	}
	other.must("PING")
	direct.must("PING")
	// Inside MULTI the kill would run at EXEC.
	rc := dialRaw(t, addr)
	id, _ := ownConn(t, rc)
	rc.must("MULTI")
	v, _ := rc.do("CLIENT", "KILL", "ID", id)
	if diff := cmp.Diff(any(resp.Error("ERR heatsink proxy: CLIENT KILL inside MULTI is not supported through the proxy")), v); diff != "" {
		t.Errorf("CLIENT KILL in MULTI (-want +got):\n%s", diff)
	}
	// Refused at queue time, as Redis refuses a command: EXEC aborts.
	v, _ = rc.do("EXEC")
	if diff := cmp.Diff(any(resp.Error("EXECABORT Transaction discarded because of previous errors.")), v); diff != "" {
		t.Errorf("EXEC after the refused CLIENT KILL (-want +got):\n%s", diff)
	}
}
