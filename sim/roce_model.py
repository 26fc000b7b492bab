"""Golden model of the RoCE v2 parser and deparser.

Written from docs/ARCHITECTURE.md ("Parser contract", "Deparser contract"), never from the RTL. The
header record is a dict keyed by the names of :data:`netreduce.wire.PARSED_HEADER_FIELDS` (ints), the
verdicts a dict keyed by :data:`netreduce.wire.PAYLOAD_VERDICT_FIELDS` (0 or 1).

Where the contract leaves a field's value open, the model decodes a header only when the frame has it
(see docs/ARCHITECTURE.md, "Host library"):

- Ethernet fields always (bytes past the end of the frame read as zero);
- IP fields when ``ip_version`` is 4 or 6;
- UDP fields when the IP protocol (next header) is 17 and, for IPv4, the packet is not a fragment (the
  more-fragments flag and the fragment offset are 0: the same condition as for RoCE, the port aside);
- BTH and extension-header fields, ``opcode_known`` and ``hdr_len`` only when ``roce = 1``.

Every other field reads 0. The hot path uses only ``int.from_bytes``, ``struct`` and ``zlib``.
"""

import ipaddress
import struct
import zlib
from dataclasses import dataclass

from netreduce.wire import (
    ETH_MIN_FRAME,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_VLAN,
    OPCODES,
    PARSED_HEADER_FIELDS,
    PAYLOAD_VERDICT_FIELDS,
    ROCE_UDP_PORT,
)

__all__ = ["ParsedFrame", "parse_frame", "deparse_frame", "frame_summary", "has_udp", "empty_header",
           "HEADER_FIELD_NAMES", "VERDICT_FIELD_NAMES"]

HEADER_FIELD_NAMES = tuple(name for name, _ in PARSED_HEADER_FIELDS)
VERDICT_FIELD_NAMES = tuple(name for name, _ in PAYLOAD_VERDICT_FIELDS)
_ZERO_HEADER = dict.fromkeys(HEADER_FIELD_NAMES, 0)

# Frames shorter than this are zero-extended before the header fields are read (rule 1: bytes past
# the end read as zero); the deepest header byte is at most 18 + 40 + 8 + 12 + 20 = 98.
_READ_SPAN = 128

# opcode -> (deth, reth, aeth, immdt, ieth) presence bits and the bytes of extension headers
_EXT = {code: ((info.deth, info.reth, info.aeth, info.immdt, info.ieth), info.extension_bytes)
        for code, info in OPCODES.items()}

_CRC_FF8 = zlib.crc32(b"\xff" * 8)      # CRC-32 state after the 8 bytes of 0xFF that stand for the LRH
_UNPACK_BTH = struct.Struct("!BBHBBHBBH").unpack_from   # opcode, flags, pkey, fecn/becn/resv6, qp hi/lo...
_UNPACK_10H = struct.Struct("!10H").unpack_from
_UNPACK_4H = struct.Struct("!4H").unpack_from


@dataclass(slots=True)
class ParsedFrame:
    """What the parser emits for one frame: the header record, the payload stream bytes, the verdicts."""
    header: dict
    payload: bytes
    verdict: dict


def empty_header():
    """A header record with every field 0."""
    return dict(_ZERO_HEADER)


def has_udp(header):
    """Whether the record's frame carries a decoded UDP header (UDP over IPv6, or over IPv4 unfragmented)."""
    version = header["ip_version"]
    if header["ip_proto"] != 17:
        return False
    return version == 6 or (version == 4 and header["ip_flags_frag"] & 0x3FFF == 0)


def parse_frame(frame, *, ipv6=True):
    """Parse one Ethernet frame (bytes, no preamble or FCS) as the parser contract says. ``ipv6=False``: as a
    parser built without IPv6 RoCE does, which takes an IPv6 header's traffic class only (``ip_version`` 6,
    ``ip_dscp``, ``ip_ecn``) and is RoCE over IPv4 alone."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    length = len(frame)
    f = frame if length >= _READ_SPAN else frame + bytes(_READ_SPAN - length)
    h = dict(_ZERO_HEADER)
    h["eth_dst"] = int.from_bytes(f[0:6], "big")
    h["eth_src"] = int.from_bytes(f[6:12], "big")
    ethertype = (f[12] << 8) | f[13]
    o = 14
    if ethertype == ETHERTYPE_VLAN:
        h["vlan_valid"] = 1
        h["vlan_tci"] = (f[14] << 8) | f[15]
        ethertype = (f[16] << 8) | f[17]
        o = 18
    h["ethertype"] = ethertype

    # --- IP --------------------------------------------------------------------------------------
    if ethertype == ETHERTYPE_IPV4 and f[o] == 0x45:
        version = 4
        (w0, ip_len, ip_id, flags_frag, ttl_proto, ip_csum, s0, s1, d0, d1) = _UNPACK_10H(f, o)
        csum = w0 + ip_len + ip_id + flags_frag + ttl_proto + ip_csum + s0 + s1 + d0 + d1
        csum = (csum & 0xFFFF) + (csum >> 16)
        csum = (csum & 0xFFFF) + (csum >> 16)
        ipv4_csum_ok = 1 if csum == 0xFFFF else 0
        h["ip_version"] = 4
        h["ip_dscp"] = (w0 >> 2) & 0x3F
        h["ip_ecn"] = w0 & 0x3
        h["ip_len"] = ip_len
        h["ip_id"] = ip_id
        h["ip_flags_frag"] = flags_frag
        h["ip_ttl"] = ttl_proto >> 8
        proto = ttl_proto & 0xFF
        h["ip_proto"] = proto
        h["ip_csum"] = ip_csum
        h["ip_src"] = (s0 << 16) | s1
        h["ip_dst"] = (d0 << 16) | d1
        end = o + ip_len
        u = o + 20
        udp_present = proto == 17 and flags_frag & 0x3FFF == 0
    elif ethertype == ETHERTYPE_IPV6 and f[o] >> 4 == 6:
        version = 6
        ipv4_csum_ok = 0
        first = int.from_bytes(f[o:o + 4], "big")
        ip_len = (f[o + 4] << 8) | f[o + 5]
        proto = f[o + 6]
        tc = (first >> 20) & 0xFF
        h["ip_version"] = 6
        h["ip_dscp"] = tc >> 2
        h["ip_ecn"] = tc & 0x3
        if not ipv6:
            return ParsedFrame(h, frame, {"icrc_ok": 0, "ipv4_csum_ok": 0, "len_ok": 1})
        h["ip_flow_label"] = first & 0xFFFFF
        h["ip_len"] = ip_len
        h["ip_proto"] = proto
        h["ip_ttl"] = f[o + 7]
        h["ip_src"] = int.from_bytes(f[o + 8:o + 24], "big")
        h["ip_dst"] = int.from_bytes(f[o + 24:o + 40], "big")
        end = o + 40 + ip_len
        u = o + 40
        udp_present = proto == 17
    else:
        # no IP: not RoCE; the payload stream is the whole frame
        return ParsedFrame(h, frame, {"icrc_ok": 0, "ipv4_csum_ok": 0, "len_ok": 1})

    # --- UDP -------------------------------------------------------------------------------------
    if not udp_present:
        return ParsedFrame(h, frame, {"icrc_ok": 0, "ipv4_csum_ok": ipv4_csum_ok, "len_ok": 1})
    sport, dport, udp_len, udp_csum = _UNPACK_4H(f, u)
    h["udp_sport"] = sport
    h["udp_dport"] = dport
    h["udp_len"] = udp_len
    h["udp_csum"] = udp_csum
    if dport != ROCE_UDP_PORT:
        return ParsedFrame(h, frame, {"icrc_ok": 0, "ipv4_csum_ok": ipv4_csum_ok, "len_ok": 1})

    # --- BTH and extension headers ---------------------------------------------------------------
    h["roce"] = 1
    b = u + 8
    opcode, flags, pkey, fb, qp_hi, qp_lo, ack, psn_hi, psn_lo = _UNPACK_BTH(f, b)
    pad = (flags >> 4) & 0x3
    h["bth_opcode"] = opcode
    h["bth_se"] = flags >> 7
    h["bth_migreq"] = (flags >> 6) & 1
    h["bth_pad"] = pad
    h["bth_tver"] = flags & 0xF
    h["bth_pkey"] = pkey
    h["bth_fecn"] = fb >> 7
    h["bth_becn"] = (fb >> 6) & 1
    h["bth_resv6"] = fb & 0x3F
    h["bth_dest_qp"] = (qp_hi << 16) | qp_lo
    h["bth_ack_req"] = ack >> 7
    h["bth_resv7"] = ack & 0x7F
    h["bth_psn"] = (psn_hi << 16) | psn_lo
    x = b + 12
    ext = _EXT.get(opcode)
    if ext is not None:
        h["opcode_known"] = 1
        (deth, reth, aeth, immdt, ieth), ext_bytes = ext
        if deth:
            h["has_deth"] = 1
            h["deth_qkey"] = int.from_bytes(f[x:x + 4], "big")
            h["deth_src_qp"] = int.from_bytes(f[x + 5:x + 8], "big")
            x += 8
        if reth:
            h["has_reth"] = 1
            h["reth_va"] = int.from_bytes(f[x:x + 8], "big")
            h["reth_rkey"] = int.from_bytes(f[x + 8:x + 12], "big")
            h["reth_dma_len"] = int.from_bytes(f[x + 12:x + 16], "big")
            x += 16
        if aeth:
            h["has_aeth"] = 1
            h["aeth_syndrome"] = f[x]
            h["aeth_msn"] = int.from_bytes(f[x + 1:x + 4], "big")
            x += 4
        if immdt:
            h["has_immdt"] = 1
            h["immdt"] = int.from_bytes(f[x:x + 4], "big")
            x += 4
        if ieth:
            h["has_ieth"] = 1
            h["ieth_rkey"] = int.from_bytes(f[x:x + 4], "big")
            x += 4
    hdr_len = x
    h["hdr_len"] = hdr_len

    # --- lengths, payload, ICRC --------------------------------------------------------------------
    payload_len = end - 4 - hdr_len - pad
    len_ok = 1 if (length >= end and udp_len == end - u and payload_len >= 0) else 0
    h["payload_len"] = payload_len if payload_len >= 0 else 0
    stop = min(end - 4, length)
    payload = frame[hdr_len:stop] if stop > hdr_len else b""
    icrc_ok = 0
    if len_ok:
        if version == 4:
            masked = (f[o:o + 1] + b"\xff" + f[o + 2:o + 8] + b"\xff" + f[o + 9:o + 10] + b"\xff\xff"
                      + f[o + 12:u + 6] + b"\xff\xff" + f[u + 8:b + 4] + b"\xff")
        else:
            masked = (bytes((f[o] | 0x0F,)) + b"\xff\xff\xff" + f[o + 4:o + 7] + b"\xff"
                      + f[o + 8:u + 6] + b"\xff\xff" + f[u + 8:b + 4] + b"\xff")
        crc = zlib.crc32(masked, _CRC_FF8)
        crc = zlib.crc32(frame[b + 5:end - 4], crc)
        icrc_ok = 1 if crc == int.from_bytes(frame[end - 4:end], "little") else 0
    return ParsedFrame(h, payload, {"icrc_ok": icrc_ok, "ipv4_csum_ok": ipv4_csum_ok, "len_ok": len_ok})


# --- deparser ------------------------------------------------------------------------------------------

_PACK_IPV4 = struct.Struct("!BBHHHBBH4s4s").pack
_PACK_UDP = struct.Struct("!HHHH").pack


def _ipv4_header(h):
    src = h["ip_src"].to_bytes(4, "big")
    dst = h["ip_dst"].to_bytes(4, "big")
    tos = ((h["ip_dscp"] & 0x3F) << 2) | (h["ip_ecn"] & 0x3)
    header = _PACK_IPV4(0x45, tos, h["ip_len"], h["ip_id"], h["ip_flags_frag"], h["ip_ttl"], h["ip_proto"],
                        0, src, dst)
    total = sum(_UNPACK_10H(header, 0))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF
    return header[:10] + checksum.to_bytes(2, "big") + header[12:]


def _ipv6_header(h):
    tc = ((h["ip_dscp"] & 0x3F) << 2) | (h["ip_ecn"] & 0x3)
    first = (6 << 28) | (tc << 20) | (h["ip_flow_label"] & 0xFFFFF)
    return (first.to_bytes(4, "big") + h["ip_len"].to_bytes(2, "big") + bytes((h["ip_proto"], h["ip_ttl"]))
            + h["ip_src"].to_bytes(16, "big") + h["ip_dst"].to_bytes(16, "big"))


def verdict_good(header, verdict):
    """Whether a RoCE frame with these verdicts may be forwarded as good: ICRC (and so lengths) right,
    and for IPv4 the header checksum right too."""
    return bool(verdict["icrc_ok"]) and (header["ip_version"] != 4 or bool(verdict["ipv4_csum_ok"]))


def deparse_frame(header, payload, verdict=None):
    """Build the frame for a header record and a payload stream, as the deparser contract says.

    ``verdict`` is the verdict dict riding on the payload's last beat; when it is given and
    :func:`verdict_good` says no, the ICRC is emitted inverted (stomped) so that no receiver accepts it.

    ``roce = 0``: the payload unchanged. ``roce = 1``: Ethernet, 802.1Q tag when ``vlan_valid``, IPv4
    (``ip_version`` 4, checksum recomputed) or IPv6, UDP, BTH, the extension headers whose ``has_*`` bit is
    set, the payload, the ICRC computed over what was emitted, zero padding up to 60 bytes. Lengths are
    taken from the record as they are. Whole-byte fields too wide for their place raise ``OverflowError``
    or ``struct.error``; sub-byte fields are masked to their widths.
    """
    h = header
    if not h["roce"]:
        return bytes(payload)
    parts = [h["eth_dst"].to_bytes(6, "big"), h["eth_src"].to_bytes(6, "big")]
    if h["vlan_valid"]:
        parts.append(struct.pack("!HH", ETHERTYPE_VLAN, h["vlan_tci"]))
    parts.append(h["ethertype"].to_bytes(2, "big"))
    version = h["ip_version"]
    if version == 4:
        ip = _ipv4_header(h)
    elif version == 6:
        ip = _ipv6_header(h)
    else:
        raise ValueError(f"a RoCE header record needs ip_version 4 or 6, not {version}")
    udp = _PACK_UDP(h["udp_sport"], h["udp_dport"], h["udp_len"], h["udp_csum"])
    bth = bytes((
        h["bth_opcode"],
        ((h["bth_se"] & 1) << 7) | ((h["bth_migreq"] & 1) << 6) | ((h["bth_pad"] & 3) << 4)
        | (h["bth_tver"] & 0xF),
    )) + h["bth_pkey"].to_bytes(2, "big") + bytes((
        ((h["bth_fecn"] & 1) << 7) | ((h["bth_becn"] & 1) << 6) | (h["bth_resv6"] & 0x3F),
    )) + h["bth_dest_qp"].to_bytes(3, "big") + bytes((
        ((h["bth_ack_req"] & 1) << 7) | (h["bth_resv7"] & 0x7F),
    )) + h["bth_psn"].to_bytes(3, "big")
    ext = []
    if h["has_deth"]:
        ext.append(h["deth_qkey"].to_bytes(4, "big") + b"\x00" + h["deth_src_qp"].to_bytes(3, "big"))
    if h["has_reth"]:
        ext.append(h["reth_va"].to_bytes(8, "big") + h["reth_rkey"].to_bytes(4, "big")
                   + h["reth_dma_len"].to_bytes(4, "big"))
    if h["has_aeth"]:
        ext.append(bytes((h["aeth_syndrome"],)) + h["aeth_msn"].to_bytes(3, "big"))
    if h["has_immdt"]:
        ext.append(h["immdt"].to_bytes(4, "big"))
    if h["has_ieth"]:
        ext.append(h["ieth_rkey"].to_bytes(4, "big"))
    covered = ip + udp + bth + b"".join(ext) + bytes(payload)
    # ICRC over what was emitted (rule 5): mask the variant fields of a copy
    masked = bytearray(covered)
    if version == 4:
        masked[1] = 0xFF
        masked[8] = 0xFF
        masked[10:12] = b"\xff\xff"
        u = 20
    else:
        masked[0] |= 0x0F
        masked[1:4] = b"\xff\xff\xff"
        masked[7] = 0xFF
        u = 40
    masked[u + 6:u + 8] = b"\xff\xff"
    masked[u + 12] = 0xFF
    icrc_value = zlib.crc32(masked, _CRC_FF8)
    if verdict is not None and not verdict_good(header, verdict):
        icrc_value ^= 0xFFFFFFFF
    icrc = icrc_value.to_bytes(4, "little")
    frame = b"".join(parts) + covered + icrc
    if len(frame) < ETH_MIN_FRAME:
        frame += bytes(ETH_MIN_FRAME - len(frame))
    return frame


# --- JSON summary (the CLI's record of a frame) -----------------------------------------------------------

def _address(value, version):
    if version == 4:
        return str(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    return ipaddress.IPv6Address(value).compressed


def frame_summary(index, header, verdict=None):
    """The JSON-ready record of one parsed frame.

    ``header`` is a header record (dict keyed by PARSED_HEADER_FIELDS names, from the model or from the
    RTL) and ``verdict`` the verdict dict; a :class:`ParsedFrame` may be given instead of both. Keys:
    ``frame`` (index), ``roce`` (bool), ``vlan`` (VLAN id or None), ``ip_version`` (4, 6 or None),
    ``src_ip``/``dst_ip`` (dotted IPv4 or compressed IPv6, None without IP), ``dscp`` (None without IP),
    ``udp_dport`` (None unless UDP over parsed IP, see :func:`has_udp`), ``opcode``, ``dest_qp``, ``psn``,
    ``ack_req`` (bool), ``pad``, ``pkey`` (None unless RoCE), ``reth`` ({"va", "rkey", "dma_len"} or None),
    ``immdt`` (int or None), ``aeth`` ({"syndrome", "msn"} or None), ``payload_len``, ``icrc_ok`` (bool,
    None unless RoCE), ``ipv4_csum_ok`` (bool, None unless IPv4).
    """
    if isinstance(header, ParsedFrame):
        header, verdict = header.header, header.verdict
    if verdict is None:
        raise TypeError("frame_summary needs the verdict dict with a header dict")
    h = header
    roce = bool(h["roce"])
    version = h["ip_version"] if h["ip_version"] in (4, 6) else None
    return {
        "frame": index,
        "roce": roce,
        "vlan": h["vlan_tci"] & 0xFFF if h["vlan_valid"] else None,
        "ip_version": version,
        "src_ip": _address(h["ip_src"], version) if version else None,
        "dst_ip": _address(h["ip_dst"], version) if version else None,
        "dscp": h["ip_dscp"] if version else None,
        "udp_dport": h["udp_dport"] if version and has_udp(h) else None,
        "opcode": h["bth_opcode"] if roce else None,
        "dest_qp": h["bth_dest_qp"] if roce else None,
        "psn": h["bth_psn"] if roce else None,
        "ack_req": bool(h["bth_ack_req"]) if roce else None,
        "pad": h["bth_pad"] if roce else None,
        "pkey": h["bth_pkey"] if roce else None,
        "reth": ({"va": h["reth_va"], "rkey": h["reth_rkey"], "dma_len": h["reth_dma_len"]}
                 if roce and h["has_reth"] else None),
        "immdt": h["immdt"] if roce and h["has_immdt"] else None,
        "aeth": ({"syndrome": h["aeth_syndrome"], "msn": h["aeth_msn"]} if roce and h["has_aeth"] else None),
        "payload_len": h["payload_len"],
        "icrc_ok": bool(verdict["icrc_ok"]) if roce else None,
        "ipv4_csum_ok": bool(verdict["ipv4_csum_ok"]) if version == 4 else None,
    }
