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
// Replies (server→client) are not captured: the tracker counts requests.

// snapLen is what the filter keeps of a packet: all of it (a GSO packet of
// a veth can be 64 KiB).
const snapLen = 1 << 18

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
func program(endpoints []netip.AddrPort, every uint32) ([]bpf.Instruction, error) {
	v4, err := coreProgram(endpoints, every)
	if err != nil {
		return nil, err
	}
	v6, err := coreProgram6(endpoints, every)
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
// in the sample. It uses no ancillary data, so x/net/bpf's VM runs it in
// tests as the kernel does.
func coreProgram(endpoints []netip.AddrPort, every uint32) ([]bpf.Instruction, error) {
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
	// Per endpoint: 5 instructions; a match jumps to accept, after the
	// list and the drop that ends it.
	for i, e := range v4 {
		ip := binary.BigEndian.Uint32(e.Addr().AsSlice())
		toAccept := uint32((len(v4)-1-i)*5 + 1)
		p = append(p,
			bpf.LoadAbsolute{Off: 16, Size: 4}, // destination address
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ip, SkipTrue: 3},
			bpf.LoadIndirect{Off: 2, Size: 2}, // destination port
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(e.Port()), SkipTrue: 1},
			bpf.Jump{Skip: toAccept},
		)
	}
	p = append(p, drop)
	if every > 1 {
		p = append(p,
			bpf.LoadIndirect{Off: 0, Size: 2}, // source port
			bpf.TAX{},
			bpf.LoadAbsolute{Off: 12, Size: 4}, // source address
			bpf.ALUOpX{Op: bpf.ALUOpXor},
			bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: hashMul},
			bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16},
			bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: every},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
			drop,
		)
	}
	return append(p, bpf.RetConstant{Val: snapLen}), nil
}

// coreProgram6 tests an IPv6 packet (at offset 0): TCP right after the
// fixed header (a packet with extension headers is not captured), toward
// an endpoint, in the sample. The sample hash folds the client's address
// into one word first, so Sampled agrees for both families.
func coreProgram6(endpoints []netip.AddrPort, every uint32) ([]bpf.Instruction, error) {
	var v6 []netip.AddrPort
	for _, e := range endpoints {
		if a := e.Addr(); a.Is6() && !a.Is4In6() {
			v6 = append(v6, e)
		}
	}
	const per = 11
	if len(v6)*per > bpfMaxInsns/2 {
		return nil, fmt.Errorf("capture: %d IPv6 endpoints, at most %d fit one filter", len(v6), bpfMaxInsns/2/per)
	}
	drop := bpf.RetConstant{Val: 0}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 6, Size: 1}, // next header
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipTrue: 1},
		drop,
	}
	for i, e := range v6 {
		a := e.Addr().As16()
		w := func(k int) uint32 { return binary.BigEndian.Uint32(a[4*k:]) }
		toAccept := uint32((len(v6)-1-i)*per + 1)
		p = append(p,
			bpf.LoadAbsolute{Off: 24, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(0), SkipTrue: 9},
			bpf.LoadAbsolute{Off: 28, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(1), SkipTrue: 7},
			bpf.LoadAbsolute{Off: 32, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(2), SkipTrue: 5},
			bpf.LoadAbsolute{Off: 36, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(3), SkipTrue: 3},
			bpf.LoadAbsolute{Off: 42, Size: 2}, // destination port
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(e.Port()), SkipTrue: 1},
			bpf.Jump{Skip: toAccept},
		)
	}
	p = append(p, drop)
	if every > 1 {
		p = append(p,
			bpf.LoadAbsolute{Off: 8, Size: 4}, // source address, folded
			bpf.TAX{},
			bpf.LoadAbsolute{Off: 12, Size: 4},
			bpf.ALUOpX{Op: bpf.ALUOpXor},
			bpf.TAX{},
			bpf.LoadAbsolute{Off: 16, Size: 4},
			bpf.ALUOpX{Op: bpf.ALUOpXor},
			bpf.TAX{},
			bpf.LoadAbsolute{Off: 20, Size: 4},
			bpf.ALUOpX{Op: bpf.ALUOpXor},
			bpf.TAX{},
			bpf.LoadAbsolute{Off: 40, Size: 2}, // source port
			bpf.ALUOpX{Op: bpf.ALUOpXor},
			bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: hashMul},
			bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16},
			bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: every},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
			drop,
		)
	}
	return append(p, bpf.RetConstant{Val: snapLen}), nil
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
