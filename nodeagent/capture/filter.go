package capture

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
)

// The in-kernel filter. The socket is a cooked (SOCK_DGRAM) packet socket
// for every protocol (ETH_P_ALL), so a packet starts at its network header
// whatever the interface's link type, and it is seen before the traffic
// control hooks where eBPF datapaths (Cilium, Calico's eBPF mode) redirect
// pod traffic past the IP stack; a socket bound to ETH_P_IP alone would
// miss those. The filter keeps only the packets the tracker needs, so the
// kernel copies nothing else to the agent:
//
//   - IPv4, or IPv6 with TCP right after the fixed header;
//   - received, not sent by this host (PACKET_OUTGOING): a packet a pod
//     sends enters the node on the pod's interface and is seen there once;
//     the copy leaving by another interface is dropped (the tracker would
//     take it for a retransmission and count nothing twice, but it would
//     cost a copy and a parse: in TestCaptureCountsPodsWithoutSidecar,
//     1,466 packets instead of 733 without this test);
//   - TCP, not an IPv4 fragment after the first;
//   - toward one of the scope's endpoints (destination address and port);
//   - if sampling, from a connection in the sample: a hash of the client's
//     address and port, so a connection is captured whole or not at all
//     (a command is never cut in two by the sampling) and the estimator is
//     simple: every captured count stands for SampleEvery.
//
//
// With reply sampling (replyEvery), also the replies of a subset of those
// connections: TCP from an endpoint to a client whose hash is in the
// 1-in-(every × replyEvery) sample (a subset of the 1-in-every one, so
// their requests are captured too), of which only the first replySnap
// bytes are copied: the headers and a reply's head. The rest of a large
// value is never copied; the tracker knows its length from tp_len.

// snapLen is what the filter keeps of a packet: all of it (a GSO packet of
// a veth can be 64 KiB).
const snapLen = 1 << 18

// replySnap is what the filter keeps of a reply packet: IP and TCP headers
// (at most 120 bytes) and the payload's head, where the headers of the
// replies it starts are. Replies packed behind one that reaches past it
// lose the stream (the tracker resynchronises); a sequential client's
// reply always starts its packet.
const replySnap = 2048

// maxEndpoints keeps the program under the kernel's 4,096 instructions
// (five per endpoint).
const maxEndpoints = 800

// packetOutgoing is PACKET_OUTGOING, the packet type of a packet this host
// sends.
const packetOutgoing = 4

// etherTypeIPv4 and etherTypeIPv6 are ETH_P_IP and ETH_P_IPV6.
const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
)

// program is the whole filter: the packet-type and protocol tests
// (ancillary loads, which only the kernel runs), then the IPv4 core or the
// IPv6 core. Each core ends in returns, so they can follow one another.
func program(endpoints []netip.AddrPort, every, replyEvery uint32) ([]bpf.Instruction, error) {
	v4, err := coreProgram(endpoints, every, replyEvery)
	if err != nil {
		return nil, err
	}
	v6, err := coreProgram6(endpoints, every, replyEvery)
	if err != nil {
		return nil, err
	}
	if len(v4)+len(v6) > bpfMaxInsns-16 {
		return nil, fmt.Errorf("capture: %d endpoints do not fit one filter", len(endpoints))
	}
	head := []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: packetOutgoing, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.LoadExtension{Num: bpf.ExtProto},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipFalse: 1},
		bpf.Jump{Skip: uint32(2 + len(v4))}, // to the IPv6 core
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv4, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
	}
	p := append(head, v4...)
	return append(p, v6...), nil
}

// bpfMaxInsns is the kernel's limit on a classic BPF program.
const bpfMaxInsns = 4096

// coreProgram tests an IPv4 packet (at offset 0): TCP toward an endpoint,
// in the sample (all of it kept); or, with replyEvery, TCP from an endpoint
// to a client in the reply sample (its head kept: replySnap). It uses no
// ancillary data, so x/net/bpf's VM runs it in tests as the kernel does.
func coreProgram(endpoints []netip.AddrPort, every, replyEvery uint32) ([]bpf.Instruction, error) {
	var v4 []netip.AddrPort
	for _, e := range endpoints {
		if a := e.Addr().Unmap(); a.Is4() {
			v4 = append(v4, netip.AddrPortFrom(a, e.Port()))
		}
	}
	if len(v4) > maxEndpoints {
		return nil, fmt.Errorf("capture: %d IPv4 endpoints, at most %d fit one filter", len(v4), maxEndpoints)
	}
	drop := bpf.RetConstant{Val: 0}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 9, Size: 1}, // protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipTrue: 1},
		drop,
		bpf.LoadAbsolute{Off: 6, Size: 2}, // flags and fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipFalse: 1},
		drop,
		bpf.LoadMemShift{Off: 0}, // X = IP header length
	}
	// Source (12, port X+0) and destination (16, port X+2).
	request := append(sample4(12, 0, every), bpf.RetConstant{Val: snapLen})
	var reply []bpf.Instruction
	var replyEPs []netip.AddrPort
	if replyEvery > 0 {
		reply = append(sample4(16, 2, every*replyEvery), bpf.RetConstant{Val: replySnap})
		replyEPs = v4
	}
	p = append(p, list4(v4, 16, 2, 5*len(replyEPs)+1)...)
	p = append(p, list4(replyEPs, 12, 0, 1+len(request))...)
	p = append(p, drop)
	p = append(p, request...)
	return append(p, reply...), nil
}

// list4 tests the IPv4 address at addrOff and the port at X+portOff
// against each endpoint (5 instructions each): a match jumps over the rest
// of the list and then after more instructions.
func list4(eps []netip.AddrPort, addrOff, portOff uint32, after int) []bpf.Instruction {
	var p []bpf.Instruction
	for i, e := range eps {
		ip := binary.BigEndian.Uint32(e.Addr().AsSlice())
		p = append(p,
			bpf.LoadAbsolute{Off: addrOff, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ip, SkipTrue: 3},
			bpf.LoadIndirect{Off: portOff, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(e.Port()), SkipTrue: 1},
			bpf.Jump{Skip: uint32((len(eps)-1-i)*5 + after)},
		)
	}
	return p
}

// sample4 drops an IPv4 packet whose client (address at addrOff, port at
// X+portOff) is not in the 1-in-every sample; nothing if every ≤ 1.
func sample4(addrOff, portOff, every uint32) []bpf.Instruction {
	if every <= 1 {
		return nil
	}
	return append([]bpf.Instruction{
		bpf.LoadIndirect{Off: portOff, Size: 2}, // client port
		bpf.TAX{},
		bpf.LoadAbsolute{Off: addrOff, Size: 4}, // client address
		bpf.ALUOpX{Op: bpf.ALUOpXor},
	}, hashKeeps(every)...)
}

// coreProgram6 is coreProgram for an IPv6 packet (at offset 0): TCP right
// after the fixed header (a packet with extension headers is not
// captured). The sample hash folds the client's address into one word
// first, so Sampled agrees for both families.
func coreProgram6(endpoints []netip.AddrPort, every, replyEvery uint32) ([]bpf.Instruction, error) {
	var v6 []netip.AddrPort
	for _, e := range endpoints {
		if a := e.Addr(); a.Is6() && !a.Is4In6() {
			v6 = append(v6, e)
		}
	}
	lists := 1
	if replyEvery > 0 {
		lists = 2
	}
	if lists*len(v6)*per6 > bpfMaxInsns/2 {
		return nil, fmt.Errorf("capture: %d IPv6 endpoints, at most %d fit one filter", len(v6), bpfMaxInsns/2/per6/lists)
	}
	drop := bpf.RetConstant{Val: 0}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 6, Size: 1}, // next header
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipTrue: 1},
		drop,
	}
	// Source (8, port 40) and destination (24, port 42).
	request := append(sample6(8, 40, every), bpf.RetConstant{Val: snapLen})
	var reply []bpf.Instruction
	var replyEPs []netip.AddrPort
	if replyEvery > 0 {
		reply = append(sample6(24, 42, every*replyEvery), bpf.RetConstant{Val: replySnap})
		replyEPs = v6
	}
	p = append(p, list6(v6, 24, 42, per6*len(replyEPs)+1)...)
	p = append(p, list6(replyEPs, 8, 40, 1+len(request))...)
	p = append(p, drop)
	p = append(p, request...)
	return append(p, reply...), nil
}

// per6 is the instructions of one IPv6 endpoint's test.
const per6 = 11

// list6 is list4 for IPv6 addresses (at addrOff) and ports (at portOff).
func list6(eps []netip.AddrPort, addrOff, portOff uint32, after int) []bpf.Instruction {
	var p []bpf.Instruction
	for i, e := range eps {
		a := e.Addr().As16()
		w := func(k int) uint32 { return binary.BigEndian.Uint32(a[4*k:]) }
		p = append(p,
			bpf.LoadAbsolute{Off: addrOff, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(0), SkipTrue: 9},
			bpf.LoadAbsolute{Off: addrOff + 4, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(1), SkipTrue: 7},
			bpf.LoadAbsolute{Off: addrOff + 8, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(2), SkipTrue: 5},
			bpf.LoadAbsolute{Off: addrOff + 12, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(3), SkipTrue: 3},
			bpf.LoadAbsolute{Off: portOff, Size: 2},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(e.Port()), SkipTrue: 1},
			bpf.Jump{Skip: uint32((len(eps)-1-i)*per6 + after)},
		)
	}
	return p
}

// sample6 is sample4 for an IPv6 client (address at addrOff, port at
// portOff).
func sample6(addrOff, portOff, every uint32) []bpf.Instruction {
	if every <= 1 {
		return nil
	}
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: addrOff, Size: 4}, // client address, folded
		bpf.TAX{},
		bpf.LoadAbsolute{Off: addrOff + 4, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: addrOff + 8, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: addrOff + 12, Size: 4},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: portOff, Size: 2}, // client port
		bpf.ALUOpX{Op: bpf.ALUOpXor},
	}, hashKeeps(every)...)
}

// hashKeeps ends a sample test: the client's folded address and port (in
// A) hashed as Sampled does, the packet dropped unless 0 modulo every.
func hashKeeps(every uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: hashMul},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: every},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
		bpf.RetConstant{Val: 0},
	}
}

// hashMul is Knuth's multiplicative hash constant (2^32 / φ).
const hashMul = 0x9E3779B1

// Sampled reports whether the filter captures a connection from client
// when it keeps one connection in every: the same hash the filter
// computes, for tests and estimates.
func Sampled(client netip.AddrPort, every uint32) bool {
	if every <= 1 {
		return true
	}
	var h uint32
	if a := client.Addr().Unmap(); a.Is4() {
		b := a.As4()
		h = binary.BigEndian.Uint32(b[:])
	} else {
		b := a.As16()
		for k := range 4 {
			h ^= binary.BigEndian.Uint32(b[4*k:])
		}
	}
	h ^= uint32(client.Port())
	h *= hashMul
	return (h>>16)%every == 0
}
