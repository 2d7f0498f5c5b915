package upstream

import "testing"

func TestParseClusterSlotsRejectsBadRanges(t *testing.T) {
	for _, in := range []string{
		"*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n",
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:7000\r\n",
		"*1\r\n*3\r\n:9\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n",
		"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:70000\r\n",
		"*1\r\n*3\r\n$1\r\nx\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n",
		"*1000000000\r\n",
	} {
		if _, err := ParseClusterSlots([]byte(in)); err == nil {
			t.Errorf("ParseClusterSlots(%q) accepted a bad reply", in)
		}
	}
	got, err := ParseClusterSlots([]byte("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"))
	if err != nil || len(got) != 1 || got[0] != (SlotRange{0, 16383, "127.0.0.1", 7000}) {
		t.Fatalf("ParseClusterSlots = %+v, %v", got, err)
	}
}
