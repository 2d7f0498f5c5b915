package capture

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
)

// ipv4TCP builds an IPv4 TCP packet (from its IP header).
func ipv4TCP(src, dst netip.AddrPort, fragOff uint16, payload string) []byte {
	b := make([]byte, 40+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[6:], fragOff)
	b[9] = 6
	copy(b[12:16], src.Addr().AsSlice())
	copy(b[16:20], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint32(b[24:], 77)
	b[32] = 5 << 4
	b[33] = 0x18
	copy(b[40:], payload)
	return b
}

func TestFilter(t *testing.T) {
	eps := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.9:6379"), netip.MustParseAddrPort("10.96.0.1:6380")}
	prog, err := coreProgram(eps, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	cli := netip.MustParseAddrPort("10.1.0.5:40000")
	for _, c := range []struct {
		pkt  []byte
		want bool
	}{
		{ipv4TCP(cli, eps[0], 0, "x"), true},
		{ipv4TCP(cli, eps[1], 0, ""), true},
		{ipv4TCP(cli, netip.MustParseAddrPort("10.0.0.9:6380"), 0, "x"), false}, // the other endpoint's port
		{ipv4TCP(cli, netip.MustParseAddrPort("10.96.0.1:6379"), 0, "x"), false},
		{ipv4TCP(eps[0], cli, 0, "x"), false},  // a reply
		{ipv4TCP(cli, eps[0], 10, "x"), false}, // a later fragment
	} {
		n, err := vm.Run(c.pkt)
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != c.want {
			t.Errorf("packet to %v: kept %v, want %v", c.pkt[16:24], n > 0, c.want)
		}
		var s segment
		if c.want && (!decodeIPv4TCP(c.pkt, 0, &s) || s.client != cli || s.seq != 77) {
			t.Errorf("decoded %+v", s)
		}
	}
	many := make([]netip.AddrPort, maxEndpoints+1)
	for i := range many {
		many[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), 6379)
	}
	if _, err := coreProgram(many, 1, 0); err == nil {
		t.Error("more endpoints than fit accepted")
	}
	if full, err := program(eps, 3, 0); err != nil {
		t.Fatal(err)
	} else if _, err := bpf.Assemble(full); err != nil {
		t.Fatal(err)
	}
}

// TestFilterSamplesWholeConnections: the kernel's hash and Sampled agree,
// so a connection is kept whole or dropped whole, and about 1 in every is
// kept.
func TestFilterSamplesWholeConnections(t *testing.T) {
	ep := netip.MustParseAddrPort("10.0.0.9:6379")
	const every = 4
	prog, _ := coreProgram([]netip.AddrPort{ep}, every, 0)
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	const conns = 4000
	for i := range conns {
		cli := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i / 200), byte(i)}), uint16(32768+i*7))
		n, _ := vm.Run(ipv4TCP(cli, ep, 0, "x"))
		if (n > 0) != Sampled(cli, every) {
			t.Fatalf("%v: the filter and Sampled disagree", cli)
		}
		if n > 0 {
			kept++
		}
	}
	// Binomial(4000, 1/4): mean 1000, sd 27; 5 sd either way.
	if kept < 865 || kept > 1135 {
		t.Errorf("kept %d of %d connections, want about %d", kept, conns, conns/every)
	}
}

// ipv6TCP builds an IPv6 TCP packet (from its IP header).
func ipv6TCP(src, dst netip.AddrPort, next byte, payload string) []byte {
	b := make([]byte, 60+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(20+len(payload)))
	b[6] = next
	s, d := src.Addr().As16(), dst.Addr().As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	binary.BigEndian.PutUint16(b[40:], src.Port())
	binary.BigEndian.PutUint16(b[42:], dst.Port())
	binary.BigEndian.PutUint32(b[44:], 77)
	b[52] = 5 << 4
	copy(b[60:], payload)
	return b
}

func TestFilterIPv6(t *testing.T) {
	ep := netip.MustParseAddrPort("[2001:db8::9]:6379")
	other := netip.MustParseAddrPort("[2001:db8::8]:6379")
	for _, every := range []uint32{1, 4} {
		prog, err := coreProgram6([]netip.AddrPort{ep, netip.MustParseAddrPort("10.0.0.1:6379")}, every, 0)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatal(err)
		}
		kept := 0
		for i := range 400 {
			cli := netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: byte(i)}), uint16(40000+i))
			n, _ := vm.Run(ipv6TCP(cli, ep, 6, "x"))
			if (n > 0) != Sampled(cli, every) {
				t.Fatalf("every %d, %v: the filter and Sampled disagree", every, cli)
			}
			if n > 0 {
				kept++
				var s segment
				if !decodePacket(ipv6TCP(cli, ep, 6, "x"), 0, &s) || s.client != cli || s.server != ep || string(s.payload) != "x" {
					t.Fatalf("decoded %+v", s)
				}
			}
			if n, _ := vm.Run(ipv6TCP(cli, other, 6, "x")); n > 0 {
				t.Fatal("a packet to another address kept")
			}
			if n, _ := vm.Run(ipv6TCP(cli, ep, 0, "x")); n > 0 {
				t.Fatal("a packet with an extension header kept")
			}
		}
		if every == 1 && kept != 400 || every == 4 && (kept < 60 || kept > 140) {
			t.Errorf("every %d: kept %d of 400", every, kept)
		}
	}
}

// TestFilterReplies: with reply sampling, a reply (from an endpoint) is
// kept, its head only, exactly when its client is in the 1-in-(every ×
// replyEvery) sample, which is within the requests' 1-in-every sample.
func TestFilterReplies(t *testing.T) {
	ep4 := netip.MustParseAddrPort("10.0.0.9:6379")
	ep6 := netip.MustParseAddrPort("[2001:db8::9]:6379")
	const every, replyEvery = 2, 4
	v4, err := coreProgram([]netip.AddrPort{ep4, netip.MustParseAddrPort("10.0.0.7:6380")}, every, replyEvery)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := coreProgram6([]netip.AddrPort{netip.MustParseAddrPort("[2001:db8::7]:6380"), ep6}, every, replyEvery)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prog []bpf.Instruction
		ep   netip.AddrPort
		pkt  func(src, dst netip.AddrPort) []byte
		cli  func(i int) netip.AddrPort
	}{
		{v4, ep4, func(s, d netip.AddrPort) []byte { return ipv4TCP(s, d, 0, "x") },
			func(i int) netip.AddrPort {
				return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), uint16(40000+i*3))
			}},
		{v6, ep6, func(s, d netip.AddrPort) []byte { return ipv6TCP(s, d, 6, "x") },
			func(i int) netip.AddrPort {
				return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 15: byte(i)}), uint16(40000+i*3))
			}},
	} {
		vm, err := bpf.NewVM(c.prog)
		if err != nil {
			t.Fatal(err)
		}
		replies := 0
		for i := range 400 {
			cli := c.cli(i)
			req, _ := vm.Run(c.pkt(cli, c.ep))
			rep, _ := vm.Run(c.pkt(c.ep, cli))
			if (req == snapLen) != Sampled(cli, every) || (rep == replySnap) != Sampled(cli, every*replyEvery) || (rep != 0 && rep != replySnap) {
				t.Fatalf("%v: request kept %d, reply %d", cli, req, rep)
			}
			if rep > 0 {
				replies++
				if req == 0 {
					t.Fatalf("%v: a reply kept whose requests are not", cli)
				}
			}
			other := netip.AddrPortFrom(c.ep.Addr(), 6390)
			if n, _ := vm.Run(c.pkt(other, cli)); n > 0 {
				t.Fatal("a packet from another port kept")
			}
		}
		if replies < 25 || replies > 80 {
			t.Errorf("%d of 400 connections' replies kept at 1 in %d", replies, every*replyEvery)
		}
	}
}
