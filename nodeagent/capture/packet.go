package capture

import (
	"encoding/binary"
	"net/netip"
)

// decodeIPv4TCP reads a captured IPv4 packet (from its IP header) as a
// client→server segment. ok is false for anything else, or a header cut
// short. A packet cut short after its headers gives the payload it has:
// the stream then has a hole, which the tracker handles as a loss.
func decodeIPv4TCP(b []byte, s *segment) (ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 6 {
		return false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return false
	}
	// Total length 0 is a GSO packet over 64 KiB (BIG TCP): take what came.
	if total := int(binary.BigEndian.Uint16(b[2:4])); total != 0 && total < len(b) {
		b = b[:total]
	}
	if len(b) < ihl+20 {
		return false
	}
	tcp := b[ihl:]
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return false
	}
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	s.client = netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:2]))
	s.server = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:4]))
	s.seq = binary.BigEndian.Uint32(tcp[4:8])
	flags := tcp[13]
	s.fin, s.syn, s.rst = flags&0x01 != 0, flags&0x02 != 0, flags&0x04 != 0
	s.payload = tcp[off:]
	return true
}
