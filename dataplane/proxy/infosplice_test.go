package proxy

import (
	"strconv"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// TestSpliceKeyspace: the first node's INFO with its Keyspace section
// replaced by every node's merged, wherever the section is, in the
// reply's own framing; errors pass through.
func TestSpliceKeyspace(t *testing.T) {
	bulk := func(s string) []byte { return resp.AppendBulk(nil, []byte(s)) }
	ks := [][]byte{bulk("# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=100\r\n"), bulk("# Keyspace\r\n"),
		bulk("# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=300\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n")}
	merged := "# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=200\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n"
	for name, tc := range map[string]struct{ first, want []byte }{
		"last section": {bulk("# Server\r\nredis_version:7.0.15\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=100\r\n"),
			bulk("# Server\r\nredis_version:7.0.15\r\n\r\n" + merged)},
		"a section after it": {bulk("# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=100\r\n\r\n# Keysizes\r\ndb0_distrib_strings_sizes:1=2\r\n"),
			bulk(merged + "\r\n# Keysizes\r\ndb0_distrib_strings_sizes:1=2\r\n")},
		"empty on the first node": {bulk("# Server\r\nx:1\r\n\r\n# Keyspace\r\n"), bulk("# Server\r\nx:1\r\n\r\n" + merged)},
		"verbatim": {[]byte("=38\r\ntxt:# Keyspace\r\ndb0:keys=2,expires=1\r\n\r\n"),
			[]byte("=" + strconv.Itoa(len(merged)+4) + "\r\ntxt:" + merged + "\r\n")},
		"no Keyspace section": {bulk("# Memory\r\nused_memory:1\r\n"), bulk("# Memory\r\nused_memory:1\r\n")},
		"an error":            {resp.AppendError(nil, "ERR x"), resp.AppendError(nil, "ERR x")},
	} {
		t.Run(name, func(t *testing.T) {
			if got := spliceKeyspace(tc.first, ks); string(got) != string(tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	failed := append(ks[:1:1], resp.AppendError(nil, "ERR down"))
	if got := spliceKeyspace(bulk("# Keyspace\r\n"), failed); string(got) != "-ERR down\r\n" {
		t.Errorf("a node's error: got %q", got)
	}
}
