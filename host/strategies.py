"""Hypothesis strategies for RoCE v2 frames, valid and malformed (imported by tests only).

Valid frames come from :func:`roce_frame_args` (keyword arguments of
:func:`netreduce.host.packets.build_roce_frame`, so a test knows every field it asked for) and
:func:`roce_frames` (the built bytes). Malformed frames come from :func:`malformed_frames` as
:class:`Malformed` records: the kind of damage, the frame, the arguments of the valid frame it was made
from (``None`` when it was not made from one) and the details of the damage, so that a test can work out
the expected verdicts on its own.
"""

import random
from typing import NamedTuple

from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from netreduce.wire import ETH_MIN_FRAME, OPCODES, ROCE_UDP_PORT

from .packets import build_roce_frame, extension_layers

__all__ = [
    "EDGE_PAYLOAD_SIZES", "KNOWN_OPCODES", "UNKNOWN_OPCODES", "payload_sizes", "payloads", "opcodes",
    "roce_frame_args", "roce_frames", "roce_frames_with_args", "Malformed", "MALFORMED_KINDS",
    "malformed_frames", "truncated_frames", "length_mismatch_frames", "bad_icrc_frames",
    "bad_ipv4_checksum_frames", "unknown_opcode_frames", "non_roce_udp_frames", "arp_frames",
    "ipv6_roce_frames", "runt_frames", "ipv4_options_frames", "fragment_frames", "non_udp_ip_frames",
    "random_frames",
]

EDGE_PAYLOAD_SIZES = (0, 1, 2, 3, 4, 60, 63, 64, 65, 1024, 4096)
KNOWN_OPCODES = tuple(sorted(OPCODES))
UNKNOWN_OPCODES = tuple(code for code in range(256) if code not in OPCODES)


def payload_sizes(max_size=4096):
    """Payload sizes in 0..max_size, half of the time one of :data:`EDGE_PAYLOAD_SIZES`."""
    edges = [size for size in EDGE_PAYLOAD_SIZES if size <= max_size]
    return st.one_of(st.sampled_from(edges), st.integers(0, max_size))


def payloads(max_size=4096):
    """Payload bytes: a size from :func:`payload_sizes`, contents from a seeded PRNG (cheap to shrink)."""
    return st.tuples(payload_sizes(max_size), st.integers(0, 2**32 - 1)).map(
        lambda size_seed: random.Random(size_seed[1]).randbytes(size_seed[0]))


def opcodes(transports=None):
    """Known opcodes (:data:`netreduce.wire.OPCODES`), optionally of some :class:`Transport` values only."""
    codes = [code for code in KNOWN_OPCODES
             if transports is None or OPCODES[code].transport in transports]
    return st.sampled_from(codes)


def _bits(n):
    return st.integers(0, (1 << n) - 1)


def _fill_extensions(draw, opcode, args):
    carried = {cls.__name__.lower() for cls in extension_layers(opcode)}
    if "deth" in carried:
        args["deth"] = (draw(_bits(32)), draw(_bits(24)))
    if "reth" in carried:
        args["reth"] = (draw(_bits(64)), draw(_bits(32)), draw(_bits(32)))
    if "aeth" in carried:
        args["aeth"] = (draw(_bits(8)), draw(_bits(24)))
    if "immdt" in carried:
        args["immdt"] = draw(_bits(32))
    if "ieth" in carried:
        args["ieth"] = draw(_bits(32))


@st.composite
def roce_frame_args(draw, opcode=None, max_payload=4096, ipv6=None, vlan=None):
    """Keyword arguments (including ``opcode`` and ``payload``) of a valid frame for
    :func:`~netreduce.host.packets.build_roce_frame`, every header field random.

    ``opcode``: a strategy or an int (default: any known opcode). ``ipv6``, ``vlan``: force them (``vlan``
    True or False), or ``None`` for random.
    """
    if opcode is None:
        opcode = opcodes()
    code = draw(opcode) if isinstance(opcode, st.SearchStrategy) else opcode
    use_ipv6 = draw(st.booleans()) if ipv6 is None else ipv6
    use_vlan = draw(st.booleans()) if vlan is None else vlan
    args = {
        "opcode": code,
        "payload": draw(payloads(max_payload)),
        "eth_dst": draw(_bits(48)), "eth_src": draw(_bits(48)),
        "ipv6": use_ipv6,
        "dscp": draw(_bits(6)), "ecn": draw(_bits(2)), "ttl": draw(_bits(8)),
        "sport": draw(_bits(16)), "udp_csum": draw(_bits(16)),
        "se": draw(_bits(1)), "migreq": draw(_bits(1)), "tver": draw(_bits(4)), "pkey": draw(_bits(16)),
        "fecn": draw(_bits(1)), "becn": draw(_bits(1)), "resv6": draw(_bits(6)),
        "dest_qp": draw(_bits(24)), "ack_req": draw(_bits(1)), "resv7": draw(_bits(7)),
        "psn": draw(st.one_of(st.sampled_from([0, 1, 0x7FFFFF, 0xFFFFFE, 0xFFFFFF]), _bits(24))),
        "pad_byte": draw(st.sampled_from([0, 0xA5])),
    }
    if use_vlan:
        args.update(vlan=draw(_bits(12)), vlan_pcp=draw(_bits(3)), vlan_dei=draw(_bits(1)))
    if use_ipv6:
        args.update(src_ip=str(draw(st.ip_addresses(v=6))), dst_ip=str(draw(st.ip_addresses(v=6))),
                    flow_label=draw(_bits(20)))
    else:
        args.update(src_ip=str(draw(st.ip_addresses(v=4))), dst_ip=str(draw(st.ip_addresses(v=4))),
                    ip_id=draw(_bits(16)), ip_flags=draw(st.sampled_from([0b000, 0b010, 0b100, 0b110])))
    if draw(st.integers(0, 3)) == 0:       # now and then a pad count that does not align the payload
        args["pad"] = draw(_bits(2))
    _fill_extensions(draw, code, args)
    return args


def _build(args):
    args = dict(args)
    return build_roce_frame(args.pop("opcode"), args.pop("payload"), **args)


def roce_frames(**kwargs):
    """Valid RoCE v2 frames (bytes); keyword arguments as :func:`roce_frame_args`."""
    return roce_frame_args(**kwargs).map(_build)


def roce_frames_with_args(**kwargs):
    """``(args, frame)`` pairs of valid RoCE v2 frames."""
    return roce_frame_args(**kwargs).map(lambda args: (args, _build(args)))


# --- malformed frames ---------------------------------------------------------------------------------

class Malformed(NamedTuple):
    kind: str
    frame: bytes
    args: dict | None      # build_roce_frame arguments of the frame it was made from (None if not made so)
    detail: dict           # what was done


_SMALL = 200   # payload bound for the frames that malformed ones are made from (speed)


@st.composite
def truncated_frames(draw, max_payload=_SMALL):
    """A valid frame cut to ``detail["length"]`` bytes (0 up to one less than its length)."""
    args = draw(roce_frame_args(max_payload=max_payload))
    frame = _build(args)
    cut = draw(st.integers(0, len(frame) - 1))
    return Malformed("truncated", frame[:cut], args, {"length": cut, "full": frame})


@st.composite
def length_mismatch_frames(draw, max_payload=_SMALL):
    """IP length (``ip_len``) or UDP length (``udp_len``) off by ``detail["delta"]`` (nonzero); or, for
    kind ``trailing_bytes``, ``detail["extra"]`` random bytes after the IP packet (a frame longer than its
    IP length says, which is still well-formed). ICRC and IPv4 checksum are computed over what is sent."""
    args = draw(roce_frame_args(max_payload=max_payload))
    what = draw(st.sampled_from(["ip_len", "udp_len", "trailing_bytes"]))
    if what == "trailing_bytes":
        extra = draw(st.binary(min_size=1, max_size=64))
        frame = _build(dict(args, eth_pad=False)) + extra
        return Malformed("trailing_bytes", frame, args, {"extra": extra})
    true_frame = _build(dict(args, eth_pad=False))
    o = 18 if "vlan" in args else 14
    true_ip_len = len(true_frame) - o - (40 if args["ipv6"] else 0)
    true_udp_len = len(true_frame) - o - (40 if args["ipv6"] else 20)
    true_value = true_ip_len if what == "ip_len" else true_udp_len
    delta = draw(st.one_of(st.integers(-8, 8), st.integers(-true_value, 0xFFFF - true_value))
                 .filter(lambda d: d != 0 and 0 <= true_value + d <= 0xFFFF))
    frame = _build(dict(args, **{what: true_value + delta}))
    return Malformed(what, frame, args, {"delta": delta, "true": true_value})


@st.composite
def bad_icrc_frames(draw, max_payload=_SMALL):
    """A valid frame whose ICRC is wrong: ICRC bits flipped (``detail["icrc_xor"]``), or one bit flipped
    inside the payload (``detail["payload_bit"]``, only when there is a payload)."""
    args = draw(roce_frame_args(max_payload=max_payload))
    frame = bytearray(_build(args))
    if args["payload"] and draw(st.booleans()):
        bit = draw(st.integers(0, 8 * len(args["payload"]) - 1))
        index = _header_bytes(args) + bit // 8
        frame[index] ^= 1 << (bit % 8)
        return Malformed("bad_icrc", bytes(frame), args, {"payload_bit": bit})
    xor = draw(st.integers(1, 2**32 - 1))
    end = _ip_end(args)
    stored = int.from_bytes(frame[end - 4:end], "little")
    frame[end - 4:end] = (stored ^ xor).to_bytes(4, "little")
    return Malformed("bad_icrc", bytes(frame), args, {"icrc_xor": xor})


@st.composite
def bad_ipv4_checksum_frames(draw, max_payload=_SMALL):
    """An IPv4 RoCE frame whose header checksum is replaced by ``detail["checksum"]`` (usually wrong; the
    ICRC, which masks the checksum, stays right)."""
    args = draw(roce_frame_args(max_payload=max_payload, ipv6=False))
    value = draw(_bits(16))
    return Malformed("bad_ipv4_csum", _build(dict(args, ipv4_csum=value)), args, {"checksum": value})


@st.composite
def unknown_opcode_frames(draw, max_payload=_SMALL):
    """A well-formed frame (good ICRC) with an opcode outside :data:`netreduce.wire.OPCODES`."""
    args = draw(roce_frame_args(opcode=st.sampled_from(UNKNOWN_OPCODES), max_payload=max_payload))
    return Malformed("unknown_opcode", _build(args), args, {})


@st.composite
def ipv6_roce_frames(draw, max_payload=_SMALL):
    """A valid RoCE v2 frame over IPv6 (parsed and forwarded, never aggregated)."""
    args = draw(roce_frame_args(max_payload=max_payload, ipv6=True))
    return Malformed("ipv6_roce", _build(args), args, {})


@st.composite
def runt_frames(draw):
    """Frames under 60 bytes: a RoCE frame sent without Ethernet padding (``args`` set), or random bytes."""
    if draw(st.booleans()):
        args = draw(roce_frame_args(opcode=st.sampled_from([code for code in KNOWN_OPCODES
                                                            if not extension_layers(code)]),
                                    max_payload=2, vlan=False, ipv6=False))
        frame = _build(dict(args, eth_pad=False))
        if len(frame) < ETH_MIN_FRAME:
            return Malformed("runt", frame, args, {})
    data = draw(st.binary(max_size=ETH_MIN_FRAME - 1))
    return Malformed("runt", data, None, {})


def _ether(draw, vlan):
    layer = Ether(dst=draw(_bits(48)).to_bytes(6, "big").hex(":"), src=draw(_bits(48)).to_bytes(6, "big").hex(":"))
    if vlan:
        layer = layer / Dot1Q(vlan=draw(_bits(12)))
    return layer


def _pad(frame):
    return frame + bytes(max(0, ETH_MIN_FRAME - len(frame)))


@st.composite
def non_roce_udp_frames(draw):
    """UDP over IPv4 or IPv6 to a port other than 4791 (the payload may even look like a BTH)."""
    vlan = draw(st.booleans())
    ipv6 = draw(st.booleans())
    dport = draw(_bits(16).filter(lambda port: port != ROCE_UDP_PORT))
    body = draw(st.binary(max_size=100))
    ip = IPv6(src="fd00::1", dst="fd00::2") if ipv6 else IP(src="10.0.0.1", dst="10.0.0.2")
    frame = bytes(_ether(draw, vlan) / ip / UDP(sport=draw(_bits(16)), dport=dport) / Raw(body))
    return Malformed("non_roce_udp", _pad(frame), None, {"dport": dport, "ipv6": ipv6, "vlan": vlan})


@st.composite
def non_udp_ip_frames(draw):
    """TCP over IPv4 or IPv6."""
    vlan = draw(st.booleans())
    ipv6 = draw(st.booleans())
    ip = IPv6(src="fd00::1", dst="fd00::2") if ipv6 else IP(src="10.0.0.1", dst="10.0.0.2")
    frame = bytes(_ether(draw, vlan) / ip / TCP(sport=draw(_bits(16)), dport=ROCE_UDP_PORT)
                  / Raw(draw(st.binary(max_size=64))))
    return Malformed("non_udp", _pad(frame), None, {"ipv6": ipv6, "vlan": vlan})


@st.composite
def arp_frames(draw):
    """ARP requests and replies, padded to 60 bytes, with or without a VLAN tag."""
    vlan = draw(st.booleans())
    frame = bytes(_ether(draw, vlan) / ARP(op=draw(st.sampled_from([1, 2])), psrc="10.0.0.1", pdst="10.0.0.2"))
    return Malformed("arp", _pad(frame), None, {"vlan": vlan})


@st.composite
def ipv4_options_frames(draw, max_payload=_SMALL):
    """A RoCE frame whose IPv4 header carries ``detail["options"]`` bytes of options (IHL > 5): not RoCE v2."""
    args = draw(roce_frame_args(max_payload=max_payload, ipv6=False))
    words = draw(st.integers(1, 10))
    options = b"\x01" * (4 * words - 1) + b"\x00"      # NOPs then end of options
    return Malformed("ipv4_options", _build(dict(args, ip_options=options)), args, {"options": len(options)})


@st.composite
def fragment_frames(draw, max_payload=_SMALL):
    """A RoCE frame over IPv4 with the more-fragments flag or a fragment offset: not RoCE v2."""
    args = draw(roce_frame_args(max_payload=max_payload, ipv6=False))
    more = draw(st.booleans())
    offset = draw(_bits(13)) if not more else draw(st.one_of(st.just(0), _bits(13)))
    if not more and offset == 0:
        offset = 1
    flags = (args["ip_flags"] & 0b110) | int(more)
    return Malformed("fragment", _build(dict(args, ip_flags=flags, ip_frag=offset)), args,
                     {"more_fragments": more, "offset": offset})


def random_frames():
    """Arbitrary bytes, now and then behind a plausible Ethernet/IPv4/UDP-4791 prefix."""
    prefix = bytes.fromhex("020000000002020000000001080045000000000040004011000000000000000000000000000012b7")
    return st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=200).map(lambda tail: prefix + tail),
    ).map(lambda data: Malformed("random", data, None, {}))


MALFORMED_KINDS = {
    "truncated": truncated_frames,
    "length_mismatch": length_mismatch_frames,
    "bad_icrc": bad_icrc_frames,
    "bad_ipv4_csum": bad_ipv4_checksum_frames,
    "unknown_opcode": unknown_opcode_frames,
    "non_roce_udp": non_roce_udp_frames,
    "non_udp": non_udp_ip_frames,
    "arp": arp_frames,
    "ipv6_roce": ipv6_roce_frames,
    "runt": runt_frames,
    "ipv4_options": ipv4_options_frames,
    "fragment": fragment_frames,
    "random": random_frames,
}


def malformed_frames():
    """Any of the malformed (or unusual) frame strategies above, as :class:`Malformed` records."""
    return st.one_of([make() for make in MALFORMED_KINDS.values()])


# --- layout helpers (from the arguments, independent of any parser) ------------------------------------

def _header_bytes(args):
    """Bytes before the payload of a frame built from ``args``."""
    ext = sum(len(cls()) for cls in extension_layers(args["opcode"]))
    return (18 if "vlan" in args else 14) + (40 if args["ipv6"] else 20) + 8 + 12 + ext


def _ip_end(args):
    """Offset of the IP end of a frame built from ``args`` (without length overrides)."""
    pad = args.get("pad", -len(args["payload"]) % 4)
    return _header_bytes(args) + len(args["payload"]) + pad + 4
