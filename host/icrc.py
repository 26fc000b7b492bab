"""The RoCE v2 invariant CRC (ICRC) and the IPv4 header checksum, on whole Ethernet frames.

The ICRC rule (InfiniBand Architecture Specification, Annex A17 "RoCEv2", A17.7.3): the Ethernet CRC-32
(IEEE 802.3: reflected, initial value and final XOR all ones; :func:`zlib.crc32`) of 8 bytes of 0xFF (the
place of the InfiniBand LRH) followed by the IP header, UDP header, BTH, extension headers, payload and
pad, with the fields that routers may change set to all ones:

- IPv4: the DSCP/ECN byte, the TTL and the header checksum;
- IPv6: the traffic class, the flow label and the hop limit;
- UDP: the checksum;
- BTH: byte 4 (FECN, BECN and the six reserved bits).

The ICRC sits in the last 4 bytes of the IP packet, least significant byte first (like the Ethernet FCS).
The IP length, not the frame length, says where that is: a frame shorter than the Ethernet minimum carries
padding after the ICRC.
"""

import struct
import zlib

from netreduce.wire import ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, ICRC_BYTES

__all__ = ["compute_icrc", "icrc_ok", "fix_icrc", "ipv4_checksum", "ipv4_checksum_ok", "icrc_span"]

_UDP_PROTO = 17


def ipv4_checksum(header20):
    """The IPv4 header checksum of ``header20`` (20 bytes, or ``4 * IHL``), its own checksum field taken as 0.

    Returns the 16-bit value to store in bytes 10..11.
    """
    header = bytearray(header20)
    if len(header) < 20 or len(header) % 2:
        raise ValueError(f"an IPv4 header has an even number of bytes, at least 20, not {len(header)}")
    header[10:12] = b"\x00\x00"
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_checksum_ok(header20):
    """Whether the ones'-complement sum of the header's 16-bit words (checksum included) is 0xFFFF."""
    total = sum(struct.unpack(f"!{len(header20) // 2}H", bytes(header20)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def icrc_span(frame):
    """``(o, u, end)`` of a RoCE v2 frame: the offsets of the IP header, of the UDP header, and of the IP end.

    Raises :class:`ValueError` when the frame is not UDP over IPv4 or IPv6, or does not hold its IP packet.
    """
    frame = bytes(frame)
    if len(frame) < 14:
        raise ValueError(f"frame of {len(frame)} bytes has no Ethernet header")
    ethertype = int.from_bytes(frame[12:14], "big")
    o = 14
    if ethertype == ETHERTYPE_VLAN:
        if len(frame) < 18:
            raise ValueError("frame ends inside its 802.1Q tag")
        ethertype = int.from_bytes(frame[16:18], "big")
        o = 18
    if ethertype == ETHERTYPE_IPV4:
        if len(frame) < o + 20 or frame[o] >> 4 != 4:
            raise ValueError("truncated or not an IPv4 header")
        ihl = (frame[o] & 0x0F) * 4
        if ihl < 20:
            raise ValueError(f"IPv4 header length {ihl} is below 20")
        if frame[o + 9] != _UDP_PROTO:
            raise ValueError(f"IPv4 protocol {frame[o + 9]} is not UDP")
        end = o + int.from_bytes(frame[o + 2:o + 4], "big")
        u = o + ihl
    elif ethertype == ETHERTYPE_IPV6:
        if len(frame) < o + 40 or frame[o] >> 4 != 6:
            raise ValueError("truncated or not an IPv6 header")
        if frame[o + 6] != _UDP_PROTO:
            raise ValueError(f"IPv6 next header {frame[o + 6]} is not UDP")
        end = o + 40 + int.from_bytes(frame[o + 4:o + 6], "big")
        u = o + 40
    else:
        raise ValueError(f"ethertype 0x{ethertype:04x} is neither IPv4 nor IPv6")
    if end > len(frame):
        raise ValueError(f"IP packet ends at byte {end}, past the end of the {len(frame)}-byte frame")
    if end - ICRC_BYTES < u + 8 + 12:
        raise ValueError("IP packet too short to hold UDP, BTH and ICRC")
    return o, u, end


def _icrc_value(frame, o, u, end):
    masked = bytearray(frame[o:end - ICRC_BYTES])
    if u - o == 40 and masked[0] >> 4 == 6:      # IPv6: traffic class, flow label, hop limit
        masked[0] |= 0x0F
        masked[1:4] = b"\xff\xff\xff"
        masked[7] = 0xFF
    else:                                         # IPv4: DSCP/ECN, TTL, header checksum
        masked[1] = 0xFF
        masked[8] = 0xFF
        masked[10:12] = b"\xff\xff"
    udp = u - o
    masked[udp + 6:udp + 8] = b"\xff\xff"         # UDP checksum
    masked[udp + 8 + 4] = 0xFF                    # BTH: FECN, BECN, resv6
    return zlib.crc32(b"\xff" * 8 + bytes(masked)).to_bytes(4, "little")


def compute_icrc(frame):
    """The 4 ICRC bytes (in wire order) that ``frame`` should carry; raises :class:`ValueError` if not RoCE v2."""
    frame = bytes(frame)
    return _icrc_value(frame, *icrc_span(frame))


def icrc_ok(frame):
    """Whether ``frame`` is UDP over IP holding its whole IP packet and its stored ICRC matches."""
    frame = bytes(frame)
    try:
        o, u, end = icrc_span(frame)
    except ValueError:
        return False
    return frame[end - ICRC_BYTES:end] == _icrc_value(frame, o, u, end)


def fix_icrc(frame):
    """``frame`` with its ICRC recomputed (Ethernet padding after the IP end is kept)."""
    frame = bytes(frame)
    o, u, end = icrc_span(frame)
    return frame[:end - ICRC_BYTES] + _icrc_value(frame, o, u, end) + frame[end:]
