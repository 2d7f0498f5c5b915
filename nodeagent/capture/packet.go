package capture

import (
	"encoding/binary"
	"net/netip"
)

// decodePacket reads an IPv4 or IPv6 packet as decodeIPv4TCP and
// decodeIPv6TCP do. b is what was captured of it, wire its length (the
// kernel's tp_len; 0: len(b)): a reply's packet is captured only in part.
func decodePacket(b []byte, wire int, s *segment) bool {
	if len(b) > 0 && b[0]>>4 == 6 {
		return decodeIPv6TCP(b, wire, s)
	}
	return decodeIPv4TCP(b, wire, s)
}

// decodeIPv6TCP reads a captured IPv6 packet whose fixed header is
// followed by TCP (the filter passes no other).
func decodeIPv6TCP(b []byte, wire int, s *segment) bool {
	wire = max(wire, len(b))
	if len(b) < 60 || b[0]>>4 != 6 || b[6] != 6 {
		return false
	}
	// Payload length 0 is a jumbogram or BIG TCP: take what came.
	if n := int(binary.BigEndian.Uint16(b[4:6])); n != 0 && 40+n < wire {
		wire = 40 + n
		b = b[:min(len(b), wire)]
	}
	return tcpSegment(b[40:], wire-40, netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), s)
}

// decodeIPv4TCP reads a captured IPv4 packet (from its IP header) as a
// segment from its source to its destination. ok is false for anything else, or a header cut
// short. A packet cut short after its headers gives the payload it has:
// the stream then has a hole, which the tracker handles as a loss.
func decodeIPv4TCP(b []byte, wire int, s *segment) (ok bool) {
	wire = max(wire, len(b))
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 6 {
		return false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return false
	}
	// Total length 0 is a GSO packet over 64 KiB (BIG TCP): take what came.
	// Ethernet pads a short frame: the total length says where it ends.
	if total := int(binary.BigEndian.Uint16(b[2:4])); total != 0 && total < wire {
		wire = total
		b = b[:min(len(b), wire)]
	}
	if len(b) < ihl+20 {
		return false
	}
	return tcpSegment(b[ihl:], wire-ihl, netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20])), s)
}

// tcpSegment reads a TCP header and payload sent from src to dst; wire
// is the segment's length on the wire (len(tcp) or more).
func tcpSegment(tcp []byte, wire int, src, dst netip.Addr, s *segment) bool {
	if len(tcp) < 20 {
		return false
	}
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return false
	}
	s.client = netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:2]))
	s.server = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:4]))
	s.seq = binary.BigEndian.Uint32(tcp[4:8])
	s.ack = binary.BigEndian.Uint32(tcp[8:12])
	flags := tcp[13]
	s.fin, s.syn, s.rst = flags&0x01 != 0, flags&0x02 != 0, flags&0x04 != 0
	s.payload = tcp[off:]
	s.wire = max(wire-off, len(s.payload))
	return true
}
