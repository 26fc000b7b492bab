"""RoCE v2 parser: a frame stream in; a header stream and a lane-0-aligned payload stream out.

Behaviour: docs/ARCHITECTURE.md, "Parser contract". Structure (every stage takes one beat per clock):

``capture``   copies the first ``window_bytes`` of each frame into a window while the beats themselves
              wait in the beat FIFO;
``decode``    turns a window into a :data:`FrameContext` (the header record plus the offsets and static
              length verdicts the later stages need), one per frame;
``process``   walks the frame's beats with its context: masks the ICRC fields and accumulates the CRC
              (the ICRC is right when the state after the IP end equals a per-lane residue constant),
              counts the frame length, and strips the header with a one-beat-delayed realigner whose
              final beat goes out in the cycle after the frame's last beat (the cycle in which the next
              frame's first beat, which never yields payload, comes in);
``join``      attaches the frame's verdicts, known after its last beat, to its last payload beat.

The beat FIFO is deep enough for a frame's window to be decoded before its first beat leaves it, so
back-to-back frames flow without bubbles; frames shorter than the window (runts) may slow the input.
"""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..wire import (AETH, BTH, DETH, ETH_HEADER, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, IETH,
                    IMMDT, IPV4_HEADER, IPV6_HEADER, MAX_HEADER_BYTES, OPCODES, RETH, ROCE_UDP_PORT,
                    UDP_HEADER, field_offsets, header_bytes)
from .crc import ICRC_MASK_LAYOUTS, crc_update, icrc_beat_masks, residue_after
from .stream import FrameBeat, ParsedHeader, Verdict, check_width, frame_stream, \
    header_stream, payload_stream

__all__ = ["RoceParser", "FrameContext", "decode_window", "window_bytes_for", "keep_count",
           "thermometer"]

POS_BITS = 17   # byte positions within a frame (frames up to 64 KiB + headers)

FrameContext = data.StructLayout({
    "header": ParsedHeader,
    "end": POS_BITS,        # E: the IP end (the byte after the ICRC)
    "cut": POS_BITS,        # where the payload stream stops: E - 4, or all ones for non-RoCE frames
    "lens_ok": 1,           # UDP length and payload length agree with the IP length
    "csum_ok": 1,           # IPv4 header checksum verdict
    "layout": 2,            # ICRC mask layout: vlan + 2 * ipv6
})


def window_bytes_for(width):
    """Bytes of each frame copied for header decoding: the longest header, rounded up to whole beats."""
    beat = width // 8
    return -(-MAX_HEADER_BYTES // beat) * beat


def keep_count(m, keep, nbytes):
    """Number of bytes in a contiguous ``keep`` (as a new signal)."""
    count = Signal(range(nbytes + 1))
    for lane in range(nbytes):
        with m.If(keep[lane]):
            m.d.comb += count.eq(lane + 1)
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


def decode_window(m, window, window_bytes):
    """Combinational decode of a frame's first ``window_bytes`` bytes into a :data:`FrameContext`."""
    ctx = Signal(FrameContext)
    hdr = ctx.header
    eth = _fields(window, 0, ETH_HEADER)
    vlan = Signal()
    m.d.comb += [
        vlan.eq(eth["ethertype"] == ETHERTYPE_VLAN),
        hdr.eth_dst.eq(eth["dst"]), hdr.eth_src.eq(eth["src"]),
        hdr.vlan_valid.eq(vlan),
        hdr.vlan_tci.eq(Mux(vlan, _be(window, 14, 2), 0)),
        hdr.ethertype.eq(Mux(vlan, _be(window, 16, 2), eth["ethertype"])),
    ]
    l3_byte = Mux(vlan, window[18 * 8:19 * 8], window[14 * 8:15 * 8])
    is_v4 = (hdr.ethertype == ETHERTYPE_IPV4) & (l3_byte == 0x45)
    is_v6 = (hdr.ethertype == ETHERTYPE_IPV6) & (l3_byte[4:8] == 6)
    m.d.comb += [
        hdr.ip_version.eq(Mux(is_v4, 4, Mux(is_v6, 6, 0))),
        ctx.layout.eq(Cat(vlan, is_v6)),
    ]

    opcode_has = {name: Signal(name=f"has_{name}") for name in ("deth", "reth", "aeth", "immdt", "ieth")}
    ext_bytes = Signal(range(64))
    csum = Signal(20)
    ip_end = Signal(POS_BITS)
    udp_at = Signal(POS_BITS)
    bth_end = Signal(8)
    udp_ok = Signal()   # IP says UDP and is not a fragment

    for vlan_v, ipv6_v, l3 in ICRC_MASK_LAYOUTS:
        with m.If((vlan == vlan_v) & Mux(ipv6_v, is_v6, is_v4)):
            if ipv6_v:
                ip = _fields(window, l3, IPV6_HEADER)
                udp = l3 + header_bytes(IPV6_HEADER)
                m.d.comb += [
                    hdr.ip_dscp.eq(ip["traffic_class"][2:8]), hdr.ip_ecn.eq(ip["traffic_class"][0:2]),
                    hdr.ip_len.eq(ip["payload_length"]), hdr.ip_ttl.eq(ip["hop_limit"]),
                    hdr.ip_proto.eq(ip["next_header"]), hdr.ip_flow_label.eq(ip["flow_label"]),
                    hdr.ip_src.eq(ip["src"]), hdr.ip_dst.eq(ip["dst"]),
                    ip_end.eq(udp + ip["payload_length"]),
                    udp_ok.eq(ip["next_header"] == 17),
                ]
            else:
                ip = _fields(window, l3, IPV4_HEADER)
                udp = l3 + header_bytes(IPV4_HEADER)
                words = [_be(window, l3 + 2 * i, 2) for i in range(10)]
                m.d.comb += [
                    hdr.ip_dscp.eq(ip["dscp"]), hdr.ip_ecn.eq(ip["ecn"]),
                    hdr.ip_len.eq(ip["total_length"]), hdr.ip_id.eq(ip["identification"]),
                    hdr.ip_flags_frag.eq(ip["flags_fragment"]), hdr.ip_ttl.eq(ip["ttl"]),
                    hdr.ip_proto.eq(ip["protocol"]), hdr.ip_csum.eq(ip["checksum"]),
                    hdr.ip_src.eq(ip["src"]), hdr.ip_dst.eq(ip["dst"]),
                    ip_end.eq(l3 + ip["total_length"]),
                    udp_ok.eq((ip["protocol"] == 17) & (ip["flags_fragment"][0:14] == 0)),
                    csum.eq(sum(words)),
                ]
            udp_f = _fields(window, udp, UDP_HEADER)
            bth_at = udp + header_bytes(UDP_HEADER)
            bth = _fields(window, bth_at, BTH)
            after_bth = bth_at + header_bytes(BTH)
            m.d.comb += [udp_at.eq(udp), bth_end.eq(after_bth)]
            with m.If(udp_ok):
                m.d.comb += [
                    hdr.udp_sport.eq(udp_f["sport"]), hdr.udp_dport.eq(udp_f["dport"]),
                    hdr.udp_len.eq(udp_f["length"]), hdr.udp_csum.eq(udp_f["checksum"]),
                ]
            with m.If(hdr.roce):
                for name, value in bth.items():
                    m.d.comb += getattr(hdr, f"bth_{name}").eq(value)
                deth = _fields(window, after_bth, DETH)
                reth = _fields(window, after_bth, RETH)
                aeth = _fields(window, after_bth, AETH)
                ieth = _fields(window, after_bth, IETH)
                imm_at = {0: after_bth, header_bytes(RETH): after_bth + header_bytes(RETH),
                          header_bytes(DETH): after_bth + header_bytes(DETH)}
                imm_offset = Mux(opcode_has["reth"], imm_at[header_bytes(RETH)],
                                 Mux(opcode_has["deth"], imm_at[header_bytes(DETH)], after_bth))
                immdt = Signal(32)
                with m.Switch(imm_offset):
                    for at in imm_at.values():
                        with m.Case(at):
                            m.d.comb += immdt.eq(_fields(window, at, IMMDT)["immdt"])
                m.d.comb += [
                    hdr.has_deth.eq(opcode_has["deth"]), hdr.has_reth.eq(opcode_has["reth"]),
                    hdr.has_aeth.eq(opcode_has["aeth"]), hdr.has_immdt.eq(opcode_has["immdt"]),
                    hdr.has_ieth.eq(opcode_has["ieth"]),
                ]
                with m.If(opcode_has["deth"]):
                    m.d.comb += [hdr.deth_qkey.eq(deth["qkey"]), hdr.deth_src_qp.eq(deth["src_qp"])]
                with m.If(opcode_has["reth"]):
                    m.d.comb += [hdr.reth_va.eq(reth["va"]), hdr.reth_rkey.eq(reth["rkey"]),
                                 hdr.reth_dma_len.eq(reth["dma_len"])]
                with m.If(opcode_has["aeth"]):
                    m.d.comb += [hdr.aeth_syndrome.eq(aeth["syndrome"]), hdr.aeth_msn.eq(aeth["msn"])]
                with m.If(opcode_has["immdt"]):
                    m.d.comb += hdr.immdt.eq(immdt)
                with m.If(opcode_has["ieth"]):
                    m.d.comb += hdr.ieth_rkey.eq(ieth["rkey"])
            # the opcode as it sits in the window, for the table look-up
            with m.Switch(bth["opcode"]):
                for code, info in OPCODES.items():
                    with m.Case(code):
                        m.d.comb += [opcode_has[name].eq(getattr(info, name)) for name in opcode_has]
                        m.d.comb += [ext_bytes.eq(info.extension_bytes), hdr.opcode_known.eq(hdr.roce)]

    m.d.comb += hdr.roce.eq((hdr.ip_version != 0) & udp_ok & (hdr.udp_dport == ROCE_UDP_PORT))

    folded = Signal(17)
    csum_sum = Signal(16)
    m.d.comb += [
        folded.eq(csum[0:16] + csum[16:20]),
        csum_sum.eq(folded[0:16] + folded[16]),
        ctx.csum_ok.eq((hdr.ip_version == 4) & (csum_sum == 0xFFFF)),
    ]

    payload_room = Signal(range(-(1 << (POS_BITS + 1)), 1 << POS_BITS))
    m.d.comb += payload_room.eq(ip_end - 4 - hdr.hdr_len - hdr.bth_pad)
    with m.If(hdr.roce):
        m.d.comb += [
            hdr.hdr_len.eq(bth_end + ext_bytes),
            hdr.payload_len.eq(Mux(payload_room >= 0, payload_room, 0)),
            ctx.end.eq(ip_end),
            ctx.cut.eq(ip_end - 4),
            ctx.lens_ok.eq((hdr.udp_len == ip_end - udp_at) & (payload_room >= 0)),
        ]
    with m.Else():
        m.d.comb += ctx.cut.eq(-1)
    return ctx


class RoceParser(wiring.Component):
    """Parse RoCE v2 frames; see the module docstring and docs/ARCHITECTURE.md.

    Parameters: ``width``, the datapath width in bits (64 .. 512).
    Ports: ``i`` (frame stream in), ``hdr`` (header records out), ``o`` (payload stream out).
    """

    def __init__(self, width=64):
        self.width = check_width(width)
        self.beat_bytes = width // 8
        self.window_bytes = window_bytes_for(width)
        self.window_beats = self.window_bytes // self.beat_bytes
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

        m.submodules.beats = beats = SyncFIFOBuffered(width=beat_layout.size, depth=self.window_beats + 6)
        m.submodules.windows = windows = SyncFIFOBuffered(width=8 * self.window_bytes, depth=3)
        m.submodules.contexts = contexts = SyncFIFOBuffered(width=FrameContext.size, depth=3)
        m.submodules.headers = headers = SyncFIFOBuffered(width=ParsedHeader.size, depth=4)
        m.submodules.payload = payload = SyncFIFOBuffered(width=beat_layout.size, depth=4)
        m.submodules.verdicts = verdicts = SyncFIFOBuffered(width=Verdict.size, depth=4)

        # --- capture ------------------------------------------------------------------------------
        beat_in = self.i.payload
        cap_start = Signal(init=1)
        cap_index = Signal(range(self.window_beats + 1))
        cap_done = Signal()
        window = Signal(8 * self.window_bytes)
        index = Mux(cap_start, 0, cap_index)
        done = Mux(cap_start, 0, cap_done)
        kept = beat_in.data & Cat(*[bit.replicate(8) for bit in beat_in.keep])
        window_next = Signal.like(window)
        for slot in range(self.window_beats):
            old = Mux(cap_start, 0, window[slot * width:(slot + 1) * width])
            m.d.comb += window_next[slot * width:(slot + 1) * width].eq(Mux(index == slot, kept, old))
        push = ~done & ((index == self.window_beats - 1) | beat_in.last)
        m.d.comb += [
            self.i.ready.eq(beats.w_rdy & (~push | windows.w_rdy)),
            beats.w_data.eq(beat_in),
            beats.w_en.eq(self.i.valid & self.i.ready),
            windows.w_data.eq(window_next),
            windows.w_en.eq(self.i.valid & self.i.ready & push),
        ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                window.eq(window_next),
                cap_index.eq(Mux(index == self.window_beats, index, index + 1)),
                cap_done.eq(done | push),
                cap_start.eq(beat_in.last),
            ]

        # --- decode -------------------------------------------------------------------------------
        decoded = decode_window(m, windows.r_data, self.window_bytes)
        m.d.comb += [
            contexts.w_data.eq(decoded),
            contexts.w_en.eq(windows.r_rdy & contexts.w_rdy),
            windows.r_en.eq(windows.r_rdy & contexts.w_rdy),
        ]

        # --- process ------------------------------------------------------------------------------
        beat = data.View(beat_layout, beats.r_data)
        start = Signal(init=1)          # the next beat is the first of a frame
        held = Signal(FrameContext)     # the context of the frame under way
        ctx = Signal(FrameContext)      # the context of the current beat
        m.d.comb += ctx.eq(Mux(start, contexts.r_data, held.as_value()))
        base = Signal(POS_BITS)
        pos = Signal(POS_BITS)          # byte position of the current beat in its frame
        m.d.comb += pos.eq(Mux(start, 0, base))
        prev = Signal(width)            # the previous beat's data
        crc = Signal(32)
        crc_match = Signal()
        emitted = Signal()              # a payload beat of this frame has gone out

        strip = ctx.header.hdr_len
        shift = strip[0:lane_bits]
        strip_base = Cat(C(0, lane_bits), strip[lane_bits:])
        nkeep = keep_count(m, beat.keep, nbytes)
        frame_len = Signal(POS_BITS)
        m.d.comb += frame_len.eq(pos + nkeep)
        end_now = Signal(POS_BITS)
        m.d.comb += end_now.eq(Mux(beat.last & (frame_len < ctx.cut), frame_len, ctx.cut))

        # one-beat-delayed window: out = bytes [shift, shift + nbytes) of (prev, beat)
        win_start = Signal(POS_BITS)
        win_rem = Signal(POS_BITS)
        m.d.comb += [win_start.eq(pos - nbytes + shift), win_rem.eq(end_now - win_start)]
        emit_window = ~start & (pos >= strip_base + nbytes) & (win_start < end_now)
        window_data = Signal(width)
        m.d.comb += window_data.eq(Cat(prev, beat.data) >> (shift * 8))

        # the flush beat, emitted in the cycle after a frame's last beat
        flush = Signal()
        flush_shift = Signal(range(nbytes))
        flush_rem = Signal(range(nbytes + 1))
        flush_first = Signal()
        tail_start = pos + shift
        tail_left = (pos >= strip_base) & (tail_start < end_now)

        # ICRC: masked beat, CRC, residue compare at the beat holding the IP end
        and_mask, or_mask = icrc_beat_masks(m, ctx.layout, pos[lane_bits:], nbytes)
        end = ctx.end
        in_region = Cat(*[((pos + lane) < end).replicate(8) for lane in range(nbytes)])
        masked = Signal(width)
        m.d.comb += masked.eq(((beat.data & and_mask) | or_mask) & in_region)
        crc_next = crc_update(m, Mux(start, 0, crc), masked, nbytes)
        last_byte = end - 1
        holds_end = (last_byte[lane_bits:] == pos[lane_bits:]) & (end != 0)
        residue = Signal(32)
        with m.Switch(last_byte[0:lane_bits]):
            for lane in range(nbytes):
                with m.Case(lane):
                    m.d.comb += residue.eq(residue_after(nbytes - 1 - lane))
        match_now = Mux(start, 0, crc_match) | (holds_end & (crc_next == residue))

        # verdicts, on the last beat
        verdict = Signal(Verdict)
        len_ok = ~ctx.header.roce | (ctx.lens_ok & (frame_len >= end))
        m.d.comb += [
            verdict.len_ok.eq(len_ok),
            verdict.icrc_ok.eq(ctx.header.roce & len_ok & match_now),
            verdict.ipv4_csum_ok.eq(ctx.csum_ok),
        ]

        need_payload = emit_window | flush
        process = Signal()
        m.d.comb += process.eq(beats.r_rdy
                               & (~start | (contexts.r_rdy & headers.w_rdy))
                               & (~beat.last | verdicts.w_rdy)
                               & (~need_payload | payload.w_rdy))
        do_flush = flush & payload.w_rdy

        out_beat = Signal(beat_layout)
        with m.If(do_flush):
            m.d.comb += [
                out_beat.data.eq(prev >> (flush_shift * 8)),
                out_beat.keep.eq(thermometer(flush_rem, nbytes)),
                out_beat.first.eq(flush_first),
                out_beat.last.eq(1),
            ]
        with m.Else():
            m.d.comb += [
                out_beat.data.eq(window_data),
                out_beat.keep.eq(thermometer(win_rem, nbytes)),
                out_beat.first.eq(~emitted),
                out_beat.last.eq(win_rem <= nbytes),
            ]
        m.d.comb += [
            payload.w_data.eq(out_beat),
            payload.w_en.eq(do_flush | (process & emit_window)),
            beats.r_en.eq(process),
            contexts.r_en.eq(process & start),
            headers.w_data.eq(contexts.r_data[:ParsedHeader.size]),
            headers.w_en.eq(process & start),
            verdicts.w_data.eq(verdict),
            verdicts.w_en.eq(process & beat.last),
        ]

        with m.If(do_flush):
            m.d.sync += flush.eq(0)
        with m.If(process):
            emitted_now = Mux(start, 0, emitted) | emit_window
            m.d.sync += [
                held.eq(ctx),
                base.eq(pos + nbytes),
                start.eq(beat.last),
                prev.eq(beat.data),
                emitted.eq(emitted_now),
                crc_match.eq(match_now),
            ]
            with m.If(pos < end):
                m.d.sync += crc.eq(crc_next)
            with m.If(beat.last):
                m.d.sync += [
                    flush.eq(1),
                    flush_shift.eq(shift),
                    flush_rem.eq(Mux(tail_left, end_now - tail_start, 0)),
                    flush_first.eq(~emitted_now),
                ]
                # nothing left to send and something already sent: no flush beat
                with m.If(~tail_left & emitted_now):
                    m.d.sync += flush.eq(0)

        # --- join ---------------------------------------------------------------------------------
        pending = data.View(beat_layout, payload.r_data)
        m.d.comb += [
            self.o.valid.eq(payload.r_rdy & (~pending.last | verdicts.r_rdy)),
            self.o.payload.data.eq(pending.data & Cat(*[bit.replicate(8) for bit in pending.keep])),
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
