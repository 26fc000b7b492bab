"""RoCE v2 parser: a frame stream in; a header stream and a lane-0-aligned payload stream out.

Behaviour: docs/ARCHITECTURE.md, "Parser contract". Structure (every stage takes one beat per clock, and
every FIFO write enable and ``ready`` comes from registered state, never from a chain of ``ready``
signals; a stage that may stall is told one cycle ahead, from registered FIFO levels, that the FIFOs
behind it have room):

``capture``   an input register, then the beat FIFO and a window of the first ``window_bytes`` of each
              frame (with a flag: bytes 12..13 are the VLAN TPID);
``decode``    four registers without enable, fed by credits: (1) the VLAN tag taken out, the IP version;
              (2) each field picked at its IPv4 or IPv6 place, the opcode looked up, the RoCE decision;
              (3) the header record but ``payload_len``; (4) the header record, for the header FIFO, and
              the per-frame :data:`FrameContext` (offsets and static verdicts), for the context FIFO;
``process``   five stages that advance together while the payload and verdict FIFOs have room:
              (1) fetch a beat, with its frame's context on the first beat; (2) byte positions, the ICRC
              masks of the beat; (3) the emit decisions of the realigner, the masked beat, the length
              verdict; (4) the realigned payload beat and the CRC (the ICRC is right when the state after
              the IP end equals a per-lane residue constant); (5) the payload beat and, on the frame's last
              beat, the verdicts are written. The realigner emits output beat *j* with input beat
              *j + 1 + hdr_len // W* and the frame's last output beat (the "flush") in the slot after its
              last input beat, the slot of the next frame's first beat, which never yields payload;
``join``      the payload FIFO's last beat of a frame leaves with the head of the verdict FIFO.

The beat FIFO is deep enough for a frame's window to be decoded before its first beat leaves it, so
back-to-back frames flow without bubbles; frames shorter than the window (runts) may slow the input.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..wire import (
    AETH,
    BTH,
    DETH,
    ETH_HEADER,
    ETH_MIN_FRAME,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_VLAN,
    ICRC_BYTES,
    IETH,
    IMMDT,
    IPV4_HEADER,
    IPV6_HEADER,
    MAX_HEADER_BYTES,
    OPCODES,
    RETH,
    ROCE_UDP_PORT,
    UDP_HEADER,
    field_offsets,
    header_bytes,
)
from .crc import crc_update, icrc_beat_masks, residue_after
from .ram import BlockRAMFIFO
from .stream import FrameBeat, ParsedHeader, Verdict, check_width, frame_stream, header_stream, payload_stream
from .trees import pairwise

__all__ = ["RoceParser", "FrameContext", "decode_normalize", "decode_raw", "decode_fields",
           "decode_context", "window_bytes_for", "keep_count", "thermometer"]

POS_BITS = 17   # byte positions within a frame (frames up to 64 KiB + headers)
_DECODE_STAGES = 4
# records that may be on their way into the header and context FIFOs and not yet counted in their level,
# one per beat accepted: those of the beats accepted in the clock the input's ``ready`` was registered and
# the seven after (input register, window register, the decode registers, the write)
_DECODE_IN_FLIGHT = _DECODE_STAGES + 4

FrameContext = data.StructLayout({
    "hdr_len": 8,           # where the payload stream starts
    "end": POS_BITS,        # E: the IP end (the byte after the ICRC), 0 for non-RoCE frames
    "cut": POS_BITS,        # where the payload stream stops: E - 4, or all ones for non-RoCE frames
    "layout": 2,            # ICRC mask layout: vlan + 2 * ipv6
    "roce": 1,
    "lens_ok": 1,           # UDP length and payload length agree with the IP length
    "csum_ok": 1,           # IPv4 header checksum verdict
})


def window_bytes_for(width):
    """Bytes of each frame copied for header decoding: the longest header, rounded up to whole beats."""
    beat = width // 8
    return -(-MAX_HEADER_BYTES // beat) * beat


KEEP_GROUP = 8      # lanes whose count is one chain in ``keep_count``


def keep_count(m, keep, nbytes):
    """Number of bytes of a beat whose ``keep`` is contiguous (as a new signal): one past its highest lane set,
    0 with none (for any ``keep``). Each group of ``KEEP_GROUP`` lanes finds its highest in a chain; the
    groups are taken in a balanced tree, a higher one's where any of its lanes is set (one chain over the 128
    lanes of a 1,024-bit beat was 29 UltraScale+ LUT levels deep). A beat of 8 lanes or fewer is one chain."""
    count = Signal(range(nbytes + 1))
    groups = []
    for base in range(0, nbytes, KEEP_GROUP):
        lanes = range(base, min(base + KEEP_GROUP, nbytes))
        found = count if len(lanes) == nbytes else Signal(range(nbytes + 1), name=f"keep_count_{base}")
        for lane in lanes:
            with m.If(keep[lane]):
                m.d.comb += found.eq(lane + 1)
        groups.append((keep[lanes.start:lanes.stop].any(), found))
    _, highest = pairwise(groups, lambda low, high: (low[0] | high[0], Mux(high[0], high[1], low[1])))
    if highest is not count:
        m.d.comb += count.eq(highest)
    return count


def thermometer(count, nbytes):
    """``keep`` with the ``count`` lowest lanes set (``count`` may exceed ``nbytes``)."""
    return Cat(*[count > lane for lane in range(nbytes)])


def _be(window, offset, nbytes):
    """Big-endian value of ``nbytes`` window bytes from ``offset`` (network order)."""
    return Cat(*[window[8 * (offset + i):8 * (offset + i + 1)] for i in reversed(range(nbytes))])


def _fields(window, offset, table):
    """``{name: value}`` of a header table laid at byte ``offset`` of the window."""
    total = 8 * header_bytes(table)
    word = _be(window, offset, total // 8)
    return {name: word[total - bit - width:total - bit]
            for name, (bit, width) in field_offsets(table).items()}


# Offsets once the VLAN tag (if any) is taken out of the window: the decoder works on this
# "normalized" window, so every field has one of two positions (IPv4 or IPv6).
L3 = header_bytes(ETH_HEADER)
UDP_AT = {4: L3 + header_bytes(IPV4_HEADER), 6: L3 + header_bytes(IPV6_HEADER)}
BTH_AT = {v: at + header_bytes(UDP_HEADER) for v, at in UDP_AT.items()}
EXT_AT = {v: at + header_bytes(BTH) for v, at in BTH_AT.items()}
EXT_BYTES = max(info.extension_bytes for info in OPCODES.values())
VLAN_BYTES = 4
SPAN = range(-(1 << 16), 1 << 17)
EXTENSIONS = ("deth", "reth", "aeth", "immdt", "ieth")   # signed byte counts derived from the IP length

# what the first decode register holds: the fields at their two possible places, chosen
RawFields = data.StructLayout({
    "eth_dst": 48, "eth_src": 48, "vlan": 1, "vlan_tci": 16, "ethertype": 16,
    "is_v4": 1, "is_v6": 1,
    "ip_dscp": 6, "ip_ecn": 2, "ip_len": 16, "ip_id": 16, "ip_flags_frag": 16, "ip_ttl": 8,
    "ip_proto": 8, "ip_csum": 16, "ip_flow_label": 20, "ip_src": 128, "ip_dst": 128,
    "udp_ok": 1,                            # the IP header says UDP and is not a fragment
    "udp": 8 * header_bytes(UDP_HEADER),    # the UDP header as a big-endian word
    "bth": 8 * header_bytes(BTH),           # the BTH as a big-endian word
    "ext": 8 * EXT_BYTES,                   # the bytes after the BTH, lane 0 first
    "ip_span": 17,                          # E - o
    "ext_at": 8,                            # frame position of the bytes after the BTH, plus 4 (ICRC)
    "udp_span": SPAN,                       # E - u
    "csum_pairs": data.ArrayLayout(17, 5),  # the IPv4 header checksum, summed by pairs of words
    "roce": 1,
    "known": 1,                             # the opcode is in the table
    "ext_bytes": range(EXT_BYTES + 1),      # extension header bytes of the opcode
    **{f"has_{name}": 1 for name in EXTENSIONS},
})

# what the third decode register holds: the header record but for ``payload_len``, and the sums the last
# step only compares or chooses from
Fields = data.StructLayout({
    "header": ParsedHeader,
    "ip_end": POS_BITS,
    "udp_len_ok": 1,                        # the UDP length equals E - u
    # E - (hdr_len + bth_pad + 4 (ICRC)): the payload's length, if not negative
    "payload_room": range(-(1 << (POS_BITS + 1)), 1 << POS_BITS),
    "csum": 20,                             # the IPv4 header's words summed
})


def _split(word, table):
    """``{name: value}`` of a header table held in ``word`` as a big-endian word."""
    total = len(word)
    return {name: word[total - bit - width:total - bit] for name, (bit, width) in field_offsets(table).items()}


def Normalized(window_bytes):
    return data.StructLayout({
        "window": 8 * window_bytes,     # the window without its VLAN tag
        "vlan": 1, "vlan_tci": 16, "is_v4": 1, "is_v6": 1,
    })


def decode_normalize(m, window, vlan):
    """First decode step (combinational): take the VLAN tag out of the window and find the IP version.
    ``vlan`` says that bytes 12..13 of ``window`` are the VLAN TPID."""
    out = Signal(Normalized(len(window) // 8))
    norm = out.window
    tag_at = header_bytes(ETH_HEADER) - 2
    ethertype = Signal(16)
    l3_byte = Signal(8)
    m.d.comb += [
        norm.eq(Mux(vlan, Cat(window[:8 * tag_at], window[8 * (tag_at + VLAN_BYTES):]), window)),
        ethertype.eq(Mux(vlan, _be(window, tag_at + VLAN_BYTES, 2), _be(window, tag_at, 2))),
        l3_byte.eq(Mux(vlan, window[8 * (L3 + VLAN_BYTES):8 * (L3 + VLAN_BYTES + 1)],
                       window[8 * L3:8 * (L3 + 1)])),
        out.vlan.eq(vlan), out.vlan_tci.eq(Mux(vlan, _be(window, tag_at + 2, 2), 0)),
        out.is_v4.eq((ethertype == ETHERTYPE_IPV4) & (l3_byte == 0x45)),
        out.is_v6.eq((ethertype == ETHERTYPE_IPV6) & (l3_byte[4:8] == 6)),
    ]
    return out


def decode_raw(m, normalized, ipv6=True):
    """Second decode step (combinational, from the registered :func:`Normalized` window): pick each
    field at its IPv4 or IPv6 place, look the opcode up, and decide whether the frame is RoCE. Without
    ``ipv6``, an IPv6 header gives its traffic class only, and only IPv4 carries RoCE."""
    raw = Signal(RawFields)
    norm = normalized.window
    vlan, is_v4, is_v6 = normalized.vlan, normalized.is_v4, normalized.is_v6
    eth = _fields(norm, 0, ETH_HEADER)
    udp_ok = Signal()       # the IP header says UDP and is not a fragment
    udp_word = Signal(8 * header_bytes(UDP_HEADER))
    bth_word = Signal(8 * header_bytes(BTH))
    m.d.comb += [raw.udp_ok.eq(udp_ok), raw.udp.eq(udp_word), raw.bth.eq(bth_word)]
    ip4 = _fields(norm, L3, IPV4_HEADER)
    ip6 = _fields(norm, L3, IPV6_HEADER)
    words = [_be(norm, L3 + 2 * i, 2) for i in range(10)]
    m.d.comb += [
        raw.eth_dst.eq(eth["dst"]), raw.eth_src.eq(eth["src"]), raw.ethertype.eq(eth["ethertype"]),
        raw.ext_at.eq((Mux(is_v6, EXT_AT[6], EXT_AT[4]) if ipv6 else EXT_AT[4]) + Mux(vlan, VLAN_BYTES, 0)
                      + ICRC_BYTES),
        raw.vlan.eq(vlan), raw.vlan_tci.eq(normalized.vlan_tci),
        raw.is_v4.eq(is_v4), raw.is_v6.eq(is_v6),
        raw.ip_id.eq(ip4["identification"]), raw.ip_flags_frag.eq(ip4["flags_fragment"]),
        raw.ip_csum.eq(ip4["checksum"]), raw.ip_flow_label.eq(ip6["flow_label"]),
        [raw.csum_pairs[i].eq(words[2 * i] + words[2 * i + 1]) for i in range(5)],
    ]
    with m.If(is_v6):
        m.d.comb += [raw.ip_dscp.eq(ip6["traffic_class"][2:8]), raw.ip_ecn.eq(ip6["traffic_class"][0:2])]
    with m.Else():
        m.d.comb += [raw.ip_dscp.eq(ip4["dscp"]), raw.ip_ecn.eq(ip4["ecn"])]
    at_v6 = [
        raw.ip_len.eq(ip6["payload_length"]), raw.ip_ttl.eq(ip6["hop_limit"]),
        raw.ip_proto.eq(ip6["next_header"]), raw.ip_src.eq(ip6["src"]), raw.ip_dst.eq(ip6["dst"]),
        udp_ok.eq(ip6["next_header"] == 17),
        udp_word.eq(_be(norm, UDP_AT[6], header_bytes(UDP_HEADER))),
        bth_word.eq(_be(norm, BTH_AT[6], header_bytes(BTH))),
        raw.ext.eq(norm[8 * EXT_AT[6]:8 * (EXT_AT[6] + EXT_BYTES)]),
        raw.ip_span.eq(header_bytes(IPV6_HEADER) + ip6["payload_length"]),
        raw.udp_span.eq(ip6["payload_length"]),
    ]
    at_v4 = [
        raw.ip_len.eq(ip4["total_length"]), raw.ip_ttl.eq(ip4["ttl"]),
        raw.ip_proto.eq(ip4["protocol"]), raw.ip_src.eq(ip4["src"]), raw.ip_dst.eq(ip4["dst"]),
        udp_ok.eq((ip4["protocol"] == 17) & (ip4["flags_fragment"][0:14] == 0)),
        udp_word.eq(_be(norm, UDP_AT[4], header_bytes(UDP_HEADER))),
        bth_word.eq(_be(norm, BTH_AT[4], header_bytes(BTH))),
        raw.ext.eq(norm[8 * EXT_AT[4]:8 * (EXT_AT[4] + EXT_BYTES)]),
        raw.ip_span.eq(ip4["total_length"]),
        raw.udp_span.eq(ip4["total_length"] - header_bytes(IPV4_HEADER)),
    ]
    if ipv6:
        with m.If(is_v6):
            m.d.comb += at_v6
        with m.Else():
            m.d.comb += at_v4
    else:       # (a Python choice: an ``If`` of a constant leaves Yosys' Verilog a dangling attribute)
        m.d.comb += at_v4
    # the RoCE decision and the opcode table at both places at once, then the choice (``is_v6`` selects
    # hundreds of bits above: nothing should wait for it)
    roce_at = {}
    table_at = {}
    for version, ip in ((4, ip4), (6, ip6)) if ipv6 else ((4, ip4),):
        udp = _fields(norm, UDP_AT[version], UDP_HEADER)
        opcode = _fields(norm, BTH_AT[version], BTH)["opcode"]
        udp_here = (ip["next_header"] == 17) if version == 6 else \
            ((ip["protocol"] == 17) & (ip["flags_fragment"][0:14] == 0))
        roce_at[version] = Signal(name=f"roce_v{version}")
        m.d.comb += roce_at[version].eq(udp_here & (udp["dport"] == ROCE_UDP_PORT))
        table_at[version] = Signal(data.StructLayout({
            "known": 1, "ext_bytes": range(EXT_BYTES + 1), **dict.fromkeys(EXTENSIONS, 1)}),
            name=f"opcode_v{version}")
        with m.Switch(opcode):
            for code, info in OPCODES.items():
                with m.Case(code):
                    m.d.comb += [getattr(table_at[version], name).eq(getattr(info, name))
                                 for name in EXTENSIONS]
                    m.d.comb += [table_at[version].ext_bytes.eq(info.extension_bytes),
                                 table_at[version].known.eq(1)]
    table = Mux(is_v6, table_at[6].as_value(), table_at[4].as_value()) if ipv6 else table_at[4].as_value()
    table = data.View(table_at[4].shape(), table)
    m.d.comb += [
        raw.roce.eq(Mux(is_v6, roce_at[6], is_v4 & roce_at[4]) if ipv6 else is_v4 & roce_at[4]),
        [getattr(raw, f"has_{name}").eq(getattr(table, name)) for name in EXTENSIONS],
        raw.ext_bytes.eq(table.ext_bytes), raw.known.eq(table.known),
    ]
    return raw


def decode_fields(m, raw, ipv6=True):
    """Third decode step (combinational, from the registered :data:`RawFields`): the header record
    (but for ``payload_len``), the IP end, the room for the payload and the IPv4 header's words summed."""
    out = Signal(Fields)
    hdr = out.header
    ip_ok = Signal()        # the IP fields are decoded
    udp_ok = Signal()
    roce = raw.roce
    udp = _split(raw.udp, UDP_HEADER)
    bth = _split(raw.bth, BTH)
    m.d.comb += [
        ip_ok.eq(raw.is_v4 | raw.is_v6 if ipv6 else raw.is_v4),
        udp_ok.eq(ip_ok & raw.udp_ok),
        hdr.roce.eq(roce),
        hdr.eth_dst.eq(raw.eth_dst), hdr.eth_src.eq(raw.eth_src),
        hdr.vlan_valid.eq(raw.vlan), hdr.vlan_tci.eq(raw.vlan_tci), hdr.ethertype.eq(raw.ethertype),
        hdr.ip_version.eq(Mux(raw.is_v4, 4, Mux(raw.is_v6, 6, 0))),
        out.ip_end.eq(raw.ip_span + Mux(raw.vlan, L3 + VLAN_BYTES, L3)),
        out.udp_len_ok.eq(udp["length"] == raw.udp_span),
        out.csum.eq((raw.csum_pairs[0] + raw.csum_pairs[1]) + (raw.csum_pairs[2] + raw.csum_pairs[3])
                    + raw.csum_pairs[4]),
    ]
    with m.If(raw.is_v4 | raw.is_v6):
        m.d.comb += [hdr.ip_dscp.eq(raw.ip_dscp), hdr.ip_ecn.eq(raw.ip_ecn)]
    with m.If(ip_ok):
        m.d.comb += [
            hdr.ip_len.eq(raw.ip_len),
            hdr.ip_ttl.eq(raw.ip_ttl), hdr.ip_proto.eq(raw.ip_proto),
            hdr.ip_src.eq(raw.ip_src), hdr.ip_dst.eq(raw.ip_dst),
        ]
    with m.If(raw.is_v4):
        m.d.comb += [hdr.ip_id.eq(raw.ip_id), hdr.ip_flags_frag.eq(raw.ip_flags_frag),
                     hdr.ip_csum.eq(raw.ip_csum)]
    if ipv6:
        with m.If(raw.is_v6):
            m.d.comb += hdr.ip_flow_label.eq(raw.ip_flow_label)
    with m.If(udp_ok):
        m.d.comb += [hdr.udp_sport.eq(udp["sport"]), hdr.udp_dport.eq(udp["dport"]),
                     hdr.udp_len.eq(udp["length"]), hdr.udp_csum.eq(udp["checksum"])]

    # extension headers: the opcode table, then each header at its place after the BTH
    has = {name: getattr(raw, f"has_{name}") for name in EXTENSIONS}
    ext_bytes, known = raw.ext_bytes, raw.known
    # (the IP end less the bytes before the payload and after it: hdr_len + bth_pad + 4 (ICRC); subtracted
    # here, so that the last step only chooses by its sign)
    overhead = Signal(8)
    m.d.comb += [overhead.eq(raw.ext_at + ext_bytes + bth["pad"]), out.payload_room.eq(out.ip_end - overhead)]
    ext = raw.ext

    def ext_fields(offset, table):
        return _fields(ext, offset, table)
    deth, reth = ext_fields(0, DETH), ext_fields(0, RETH)
    aeth, ieth = ext_fields(0, AETH), ext_fields(0, IETH)
    immdt = Signal(32)
    m.d.comb += immdt.eq(Mux(has["reth"], ext_fields(header_bytes(RETH), IMMDT)["immdt"],
                             Mux(has["deth"], ext_fields(header_bytes(DETH), IMMDT)["immdt"],
                                 ext_fields(0, IMMDT)["immdt"])))
    with m.If(roce):
        m.d.comb += [getattr(hdr, f"bth_{name}").eq(value) for name, value in bth.items()]
        m.d.comb += [getattr(hdr, f"has_{name}").eq(has[name]) for name in has]
        m.d.comb += [
            hdr.opcode_known.eq(known),
            hdr.hdr_len.eq(raw.ext_at - ICRC_BYTES + ext_bytes),
        ]
        with m.If(has["deth"]):
            m.d.comb += [hdr.deth_qkey.eq(deth["qkey"]), hdr.deth_src_qp.eq(deth["src_qp"])]
        with m.If(has["reth"]):
            m.d.comb += [hdr.reth_va.eq(reth["va"]), hdr.reth_rkey.eq(reth["rkey"]),
                         hdr.reth_dma_len.eq(reth["dma_len"])]
        with m.If(has["aeth"]):
            m.d.comb += [hdr.aeth_syndrome.eq(aeth["syndrome"]), hdr.aeth_msn.eq(aeth["msn"])]
        with m.If(has["immdt"]):
            m.d.comb += hdr.immdt.eq(immdt)
        with m.If(has["ieth"]):
            m.d.comb += hdr.ieth_rkey.eq(ieth["rkey"])
    return out


def decode_context(m, fields, ipv6=True):
    """Last decode step (combinational, from the registered :data:`Fields`): the
    :data:`FrameContext`. Every value is computed into a signal of its own (no field of ``ctx`` is
    computed from another field of ``ctx``)."""
    ctx = Signal(FrameContext)
    header = Signal(ParsedHeader)
    hdr = fields.header
    roce = hdr.roce
    csum = fields.csum
    payload_room = fields.payload_room
    room_ok = Signal()
    m.d.comb += [
        room_ok.eq(~payload_room[-1]),      # (its sign bit: not a comparison's carry chain)
        header.eq(hdr),
        ctx.hdr_len.eq(hdr.hdr_len), ctx.roce.eq(roce),
        # the ones'-complement sum is 0xFFFF exactly when low + high == 0xFFFF with high < 16
        ctx.csum_ok.eq((hdr.ip_version == 4) & (csum[4:16] == 0xFFF) & (csum[0:4] == ~csum[16:20])),
        ctx.layout.eq(Cat(hdr.vlan_valid, (hdr.ip_version == 6) if ipv6 else 0)),
        header.payload_len.eq(Mux(roce & room_ok, payload_room, 0)),
        ctx.end.eq(Mux(roce, fields.ip_end, 0)),
        ctx.cut.eq(Mux(roce, fields.ip_end - ICRC_BYTES, -1)),
        ctx.lens_ok.eq(roce & fields.udp_len_ok & room_ok),
    ]
    return ctx, header


def _lane_bytes(lanes):
    """A byte mask (eight bits per lane) from one bit per lane."""
    return Cat(*[bit.replicate(8) for bit in lanes])


def Stage1(width):
    return data.StructLayout({
        "valid": 1, "data": width, "keep": width // 8, "first": 1, "last": 1,
        "pos": POS_BITS,                # byte position of the beat in its frame
        "frame": FrameContext,
    })


def Stage2(width):
    return data.StructLayout({
        "valid": 1, "data": width, "first": 1, "last": 1, "frame": FrameContext,
        "frame_len": POS_BITS,          # bytes of the frame up to the end of this beat
        "win_start": POS_BITS,          # frame position of the first byte of the window ending here
        "tail_start": POS_BITS,         # ... of the window after it (the flush beat's)
        "to_end": range(-(1 << POS_BITS), 1 << POS_BITS),     # E - pos
        "emit_base": 1,                 # a window ends in this beat (if the payload reaches it)
        "tail_base": 1,                 # ... in the next beat
        "and_mask": width, "or_mask": width,
    })


def Stage3(width):
    nbytes = width // 8
    return data.StructLayout({
        "valid": 1, "data": width, "first": 1, "last": 1,
        "shift": range(nbytes),         # hdr_len % nbytes
        "emit": 1,                      # the window ending in this beat goes out
        "win_rem": POS_BITS,            # payload bytes from the window's start
        "tail_left": 1,                 # the last beat leaves a flush beat with bytes
        "tail_rem": range(nbytes + 1),  # ... that many
        "masked": width,                # the beat with the ICRC masks applied, zero outside the region
        "crc_en": 1,                    # the beat starts before the IP end
        "holds_end": 1,                 # the IP end falls in this beat
        "residue": 32,                  # the CRC state that a right ICRC leaves after this beat
        "len_ok": 1, "roce": 1, "csum_ok": 1,
    })


def Stage4(width):
    return data.StructLayout({
        "out": FrameBeat(width), "out_valid": 1,     # the payload beat to write
        "valid": 1, "first": 1, "last": 1, "holds_end": 1, "residue": 32, "len_ok": 1, "roce": 1,
        "csum_ok": 1,
    })


class RoceParser(wiring.Component):
    """Parse RoCE v2 frames; see the module docstring and docs/ARCHITECTURE.md.

    Parameters: ``width``, the datapath width in bits (64 .. 1024); ``ipv6``: RoCE over IPv6 is parsed (without
    it, an IPv6 header gives its traffic class only: ``ip_version`` 6, ``ip_dscp``, ``ip_ecn``, and the frame
    is not RoCE; ``netreduce.sim.roce_model.parse_frame(frame, ipv6=False)``).
    Ports: ``i`` (frame stream in), ``hdr`` (header records out), ``o`` (payload stream out).
    """

    def __init__(self, width=64, *, ipv6=True):
        self.width = check_width(width)
        self.ipv6 = bool(ipv6)
        self.beat_bytes = width // 8
        self.window_bytes = window_bytes_for(width)
        self.window_beats = self.window_bytes // self.beat_bytes
        # deep enough that a frame's first beat waits at the head, not at the input, while its window
        # is decoded (input register, window register, four decode registers, context FIFO)
        self.beat_fifo_depth = self.window_beats + 17
        # The header and context FIFOs hold the records of the frames whose beats wait in the beat FIFO
        # (a frame of one beat each at 512 bits), besides those on their way into them. The context FIFO
        # fills whole distributed RAMs of 16 entries and has an output register besides (its record starts
        # the process stage's paths). The header FIFO is in block RAM (``hw.ram.BlockRAMFIFO``), whose
        # synchronous read holds the record at its head: as a distributed RAM its hundreds of cells and
        # their outputs, which fan out to the connection match's comparators, were where the board
        # switch's routing congested (docs/ARCHITECTURE.md, "Boards").
        frames_waiting = -(-self.beat_fifo_depth // -(-ETH_MIN_FRAME // self.beat_bytes))
        self.header_fifo_depth = 16 * -(-(_DECODE_IN_FLIGHT + frames_waiting + 4) // 16)
        self.record_fifo_depth = self.header_fifo_depth + 1
        super().__init__({
            "i": In(frame_stream(width)),
            "hdr": Out(header_stream()),
            "o": Out(payload_stream(width)),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes, width = self.beat_bytes, self.width
        lane_bits = exact_log2(nbytes)
        beat_layout = FrameBeat(width)

        m.submodules.beats = beats = SyncFIFOBuffered(width=beat_layout.size, depth=self.beat_fifo_depth)
        m.submodules.contexts = contexts = SyncFIFOBuffered(width=FrameContext.size, depth=self.record_fifo_depth)
        m.submodules.headers = headers = BlockRAMFIFO(width=ParsedHeader.size, depth=self.header_fifo_depth)
        m.submodules.payload = payload = SyncFIFOBuffered(width=beat_layout.size, depth=8)
        m.submodules.verdicts = verdicts = SyncFIFOBuffered(width=Verdict.size, depth=6)

        def room(fifo):
            """The FIFO had room for two more entries in the previous cycle (so for one now)."""
            return fifo.level <= fifo.depth - 2

        # --- capture: an input register, then the beat FIFO and the window ------------------------
        wbeats = self.window_beats
        # A complete window goes straight into the decode registers, which have no enable, and its record
        # into the header and context FIFOs six clocks after its last beat was accepted. So a beat is
        # accepted only when, in the previous cycle, the beat FIFO had room for three more entries and
        # the header and context FIFOs for every record that may be on its way (``_DECODE_IN_FLIGHT``).
        # ``ready`` depends on registers only.
        in_ok = Signal()
        m.d.sync += in_ok.eq((beats.level <= beats.depth - 3)
                             & (contexts.level <= contexts.depth - _DECODE_IN_FLIGHT)
                             & (headers.level <= headers.depth - _DECODE_IN_FLIGHT))
        beat_in = self.i.payload
        accept = Signal()
        m.d.comb += [self.i.ready.eq(in_ok), accept.eq(self.i.valid & in_ok)]
        in_start = Signal(init=1)           # the next beat is the first of a frame
        in_index = Signal(range(wbeats + 1))
        index = Mux(in_start, 0, in_index)
        cap = Signal(beat_layout, reset_less=True)      # the input register (with ``cap_valid``)
        cap_valid = Signal()
        cap_slot = Signal(wbeats)           # one-hot: the window slot of the beat (none past the window)
        cap_push = Signal()                 # the window is complete with this beat
        cap_first = Signal()
        m.d.sync += cap_valid.eq(accept)
        with m.If(accept):
            m.d.sync += [
                cap.eq(beat_in), cap_first.eq(in_start),
                cap_slot.eq(Cat(*[index == slot for slot in range(wbeats)])),
                cap_push.eq((index == wbeats - 1) | (beat_in.last & (index < wbeats))),
                in_index.eq(Mux(index == wbeats, index, index + 1)),
                in_start.eq(beat_in.last),
            ]
        window = Signal(8 * self.window_bytes, reset_less=True)
        kept = cap.data & _lane_bytes(cap.keep)
        window_next = Signal.like(window)
        for slot in range(wbeats):
            old = Mux(cap_first, 0, window[slot * width:(slot + 1) * width])
            m.d.comb += window_next[slot * width:(slot + 1) * width].eq(Mux(cap_slot[slot], kept, old))
        tpid_at = header_bytes(ETH_HEADER) - 2
        vlan = Signal()
        window_vlan = Signal()              # bytes 12..13 of the complete window are the VLAN TPID
        window_done = Signal()              # the window register holds a complete window
        m.d.comb += [
            vlan.eq(_be(window_next, tpid_at, 2) == ETHERTYPE_VLAN),
            beats.w_data.eq(cap),
            beats.w_en.eq(cap_valid),
        ]
        m.d.sync += window_done.eq(cap_valid & cap_push)
        with m.If(cap_valid):
            m.d.sync += [window.eq(window_next), window_vlan.eq(vlan)]

        # --- decode: complete window -> normalized -> raw fields -> fields -> context, header -------
        # (no enable: the input took the window's beats only with room for its record, above)
        # (the records of the decode and the input register are data, qualified by ``dec_valid`` and
        # ``cap_valid``: no reset, which would otherwise reach every one of their flip-flops)
        normalized = Signal(Normalized(self.window_bytes), reset_less=True)
        raw = Signal(RawFields, reset_less=True)
        fields = Signal(Fields, reset_less=True)
        dec_valid = Signal(_DECODE_STAGES)
        m.d.sync += [
            dec_valid.eq(Cat(window_done, dec_valid[:-1])),
            normalized.eq(decode_normalize(m, window, window_vlan)),
            raw.eq(decode_raw(m, normalized, self.ipv6)),
            fields.eq(decode_fields(m, raw, self.ipv6)),
        ]
        context, header = Signal(FrameContext, reset_less=True), Signal(ParsedHeader, reset_less=True)
        m.d.sync += Cat(context, header).eq(Cat(*decode_context(m, fields, self.ipv6)))
        m.d.comb += [
            contexts.w_data.eq(context),
            contexts.w_en.eq(dec_valid[-1]),
            headers.w_data.eq(header),
            headers.w_en.eq(dec_valid[-1]),
        ]

        # --- process: five stages that advance together, when every output FIFO has room ----------
        go = Signal()
        m.d.sync += go.eq(room(payload) & room(verdicts))

        # stage 1, fetch: a beat from the beat FIFO, with its frame's context on the first beat
        start = Signal(init=1)              # the next beat fetched is the first of a frame
        next_pos = Signal(POS_BITS)
        take = Signal()
        m.d.comb += take.eq(go & beats.r_rdy & (~start | contexts.r_rdy))
        head = data.View(beat_layout, beats.r_data)
        new_ctx = data.View(FrameContext, contexts.r_data)
        s1 = Signal(Stage1(width), name="s1")
        m.d.comb += [
            beats.r_en.eq(take),
            contexts.r_en.eq(take & start),
        ]
        with m.If(go):
            m.d.sync += s1.valid.eq(take)
        with m.If(take):
            m.d.sync += [
                s1.data.eq(head.data), s1.keep.eq(head.keep), s1.last.eq(head.last), s1.first.eq(start),
                s1.pos.eq(Mux(start, 0, next_pos)),
                next_pos.eq(Mux(start, 0, next_pos) + nbytes),
                start.eq(head.last),
            ]
            with m.If(start):
                m.d.sync += [
                    s1.frame.eq(new_ctx),
                ]

        # stage 2, positions: the frame length so far, the window and tail starts, the ICRC masks
        s2 = Signal(Stage2(width), name="s2")
        f1 = s1.frame
        shift1 = f1.hdr_len[0:lane_bits]
        strip_beat1 = f1.hdr_len[lane_bits:]
        beat_index1 = s1.pos[lane_bits:]
        and_mask, or_mask = icrc_beat_masks(m, f1.layout, beat_index1, nbytes)
        nkeep = keep_count(m, s1.keep, nbytes)
        with m.If(go):
            m.d.sync += [
                s2.valid.eq(s1.valid), s2.data.eq(s1.data), s2.first.eq(s1.first), s2.last.eq(s1.last),
                s2.frame.eq(f1),
                s2.frame_len.eq(s1.pos + nkeep),
                # the beat starts at a multiple of nbytes: adding the shift is a concatenation
                s2.win_start.eq(Cat(shift1, beat_index1 - 1)),
                s2.tail_start.eq(Cat(shift1, beat_index1)),
                s2.to_end.eq(f1.end - s1.pos),
                s2.emit_base.eq(~s1.first & (beat_index1 > strip_beat1)),
                s2.tail_base.eq(beat_index1 >= strip_beat1),
                s2.and_mask.eq(and_mask), s2.or_mask.eq(or_mask),
            ]

        # stage 3, decisions: what this beat emits, the masked beat for the CRC, the length verdict
        s3 = Signal(Stage3(width), name="s3")
        f2 = s2.frame
        cut_here = Signal()     # the frame ends in this beat before its cut: its end is frame_len
        m.d.comb += cut_here.eq(s2.last & (s2.frame_len < f2.cut))
        in_region = Cat(*[s2.to_end > lane for lane in range(nbytes)])
        last_lane = Signal(lane_bits)
        m.d.comb += last_lane.eq(f2.end[0:lane_bits] - 1)
        residue = Signal(32)
        with m.Switch(last_lane):
            for lane in range(nbytes):
                with m.Case(lane):
                    m.d.comb += residue.eq(residue_after(nbytes - 1 - lane))
        with m.If(go):
            m.d.sync += [
                s3.valid.eq(s2.valid), s3.data.eq(s2.data), s3.first.eq(s2.first), s3.last.eq(s2.last),
                s3.shift.eq(f2.hdr_len[0:lane_bits]),
                s3.emit.eq(s2.emit_base & Mux(cut_here, s2.win_start < s2.frame_len,
                                              s2.win_start < f2.cut)),
                s3.win_rem.eq(Mux(cut_here, s2.frame_len - s2.win_start, f2.cut - s2.win_start)),
                s3.tail_left.eq(s2.tail_base & Mux(cut_here, s2.tail_start < s2.frame_len,
                                                   s2.tail_start < f2.cut)),
                s3.tail_rem.eq(Mux(cut_here, s2.frame_len - s2.tail_start, f2.cut - s2.tail_start)),
                s3.masked.eq(((s2.data & s2.and_mask) | s2.or_mask) & _lane_bytes(in_region)),
                s3.crc_en.eq(s2.to_end > 0),
                s3.holds_end.eq((s2.to_end > 0) & (s2.to_end <= nbytes)),
                s3.residue.eq(residue),
                s3.len_ok.eq(~f2.roce | (f2.lens_ok & (s2.frame_len >= f2.end))),
                s3.roce.eq(f2.roce), s3.csum_ok.eq(f2.csum_ok),
            ]

        # stage 4, execute: the realigner, the payload FIFO write and the CRC
        prev = Signal(width)            # the previous beat's data
        emitted = Signal()              # a payload beat of this frame has gone out
        crc = Signal(32)
        flush = Signal()                # the frame's last payload beat goes out in this cycle
        flush_shift = Signal(range(nbytes))
        flush_rem = Signal(range(nbytes + 1))
        flush_first = Signal()
        window_data = Signal(width)
        m.d.comb += window_data.eq(Cat(prev, s3.data) >> (s3.shift * 8))
        crc_in = Signal(32)
        m.d.comb += crc_in.eq(Mux(s3.first, 0, crc))
        crc_next = crc_update(m, crc_in, s3.masked, nbytes)
        emitted_now = Signal()
        m.d.comb += emitted_now.eq(Mux(s3.first, 0, emitted) | s3.emit)

        out_beat = Signal(beat_layout)
        with m.If(flush):
            m.d.comb += [
                out_beat.data.eq(prev >> (flush_shift * 8)),
                out_beat.keep.eq(thermometer(flush_rem, nbytes)),
                out_beat.first.eq(flush_first),
                out_beat.last.eq(1),
            ]
        with m.Else():
            m.d.comb += [
                out_beat.data.eq(window_data),
                out_beat.keep.eq(thermometer(s3.win_rem, nbytes)),
                out_beat.first.eq(~emitted),
                out_beat.last.eq(s3.win_rem <= nbytes),
            ]
        s4 = Signal(Stage4(width), name="s4")
        with m.If(go):
            m.d.sync += [
                s4.out.eq(out_beat), s4.out_valid.eq(flush | (s3.valid & s3.emit)),
                s4.valid.eq(s3.valid), s4.first.eq(s3.first), s4.last.eq(s3.last),
                s4.holds_end.eq(s3.holds_end), s4.residue.eq(s3.residue), s4.len_ok.eq(s3.len_ok),
                s4.roce.eq(s3.roce), s4.csum_ok.eq(s3.csum_ok),
                flush.eq(0),
            ]
            with m.If(s3.valid):
                m.d.sync += [prev.eq(s3.data), emitted.eq(emitted_now)]
                with m.If(s3.crc_en):
                    m.d.sync += crc.eq(crc_next)
                with m.If(s3.last):
                    m.d.sync += [
                        # nothing left to send and something already sent: no flush beat
                        flush.eq(s3.tail_left | ~emitted_now),
                        flush_shift.eq(s3.shift),
                        flush_rem.eq(Mux(s3.tail_left, s3.tail_rem, 0)),
                        flush_first.eq(~emitted_now),
                    ]

        # stage 5, write: the payload beat, and the verdicts (``crc`` now holds the state after the
        # beat), so that a last payload beat and its verdicts enter their FIFOs together
        m.d.comb += [
            payload.w_data.eq(s4.out),
            payload.w_en.eq(go & s4.out_valid),
        ]
        crc_match = Signal()
        match_now = Signal()
        m.d.comb += match_now.eq(Mux(s4.first, 0, crc_match) | (s4.holds_end & (crc == s4.residue)))
        verdict = Signal(Verdict)
        m.d.comb += [
            verdict.len_ok.eq(s4.len_ok),
            verdict.icrc_ok.eq(s4.roce & s4.len_ok & match_now),
            verdict.ipv4_csum_ok.eq(s4.csum_ok),
            verdicts.w_data.eq(verdict),
            verdicts.w_en.eq(go & s4.valid & s4.last),
        ]
        with m.If(go & s4.valid):
            m.d.sync += crc_match.eq(match_now)

        # --- join ---------------------------------------------------------------------------------
        pending = data.View(beat_layout, payload.r_data)
        m.d.comb += [
            self.o.valid.eq(payload.r_rdy & (~pending.last | verdicts.r_rdy)),
            self.o.payload.data.eq(pending.data & _lane_bytes(pending.keep)),
            self.o.payload.keep.eq(pending.keep),
            self.o.payload.first.eq(pending.first),
            self.o.payload.last.eq(pending.last),
            payload.r_en.eq(self.o.valid & self.o.ready),
            verdicts.r_en.eq(self.o.valid & self.o.ready & pending.last),
        ]
        with m.If(pending.last):
            m.d.comb += self.o.payload.verdict.eq(verdicts.r_data)

        m.d.comb += [
            self.hdr.valid.eq(headers.r_rdy),
            self.hdr.payload.eq(headers.r_data),
            headers.r_en.eq(self.hdr.ready),
        ]
        return m
