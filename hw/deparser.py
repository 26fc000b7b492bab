"""RoCE v2 deparser: a header record and a payload stream back into a frame, with a fresh ICRC.

Behaviour: docs/ARCHITECTURE.md, "Deparser contract". Structure (one output beat per clock, with no
bubbles between back-to-back frames):

``serialize``  turns each header record into the bytes of its headers (IPv4 checksum recomputed) and
               their length; one record per clock into the plan FIFO;
``merge``      emits the frame beat by beat: whole header beats, then header tail and payload merged at
               the header length's byte offset, then the payload's last bytes, zero placeholders for
               the ICRC and zero Ethernet padding up to 60 bytes (with ``whole_frames``, a frame
               starts only once its payload's first beat is there);
``icrc``       a pipeline beside the frame: masks the ICRC fields, accumulates the CRC, *rewinds* the
               state over the zero bytes after the region in the beat that holds the ICRC (one fixed
               matrix per bit of that count, one stage each), and writes the ICRC into its placeholder,
               spilling into the next beat when it straddles two.

No ``ready`` is a chain through the stages: the payload comes in through a FIFO (``i.ready`` is its
registered room), the ICRC pipeline never stalls, and its beats go into an output FIFO that the merge
stage may fill only while it holds a credit (one per free entry, counted in a register), so ``o.ready``
reaches nothing but that FIFO.
"""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..wire import (AETH, BTH, DETH, ETH_MIN_FRAME, ETHERTYPE_VLAN, ICRC_BYTES, IETH, IMMDT, IPV4_HEADER,
                    IPV6_HEADER, RETH, UDP_HEADER, header_bytes)
from .crc import apply_taps, crc_update, icrc_beat_masks, rewind_taps
from .parser import POS_BITS, keep_count, window_bytes_for
from .stream import FrameBeat, PayloadBeat, check_width, frame_stream, header_stream, payload_stream

__all__ = ["RoceDeparser", "serialize_header", "lanes_below"]


def lanes_below(limit, beat_index, nbytes):
    """``keep`` of the lanes of beat ``beat_index`` (at byte ``beat_index * nbytes``) that lie before byte
    ``limit``; each lane's position is a concatenation, not a sum."""
    lane_bits = exact_log2(nbytes)
    return Cat(*[limit > Cat(C(lane, lane_bits), beat_index) for lane in range(nbytes)])


def _pack(table, values):
    """Bytes (wire order) of a header table from ``{name: Value}``; missing fields are zero."""
    word = Cat(*[values.get(name, C(0, width))[:width] for name, width in reversed(table)])
    total = len(word)
    return [word[total - 8 * (i + 1):total - 8 * i] for i in range(total // 8)]


def ipv4_checksum(header_bytes_list):
    """The IPv4 header checksum of 20 header bytes whose checksum bytes are zero."""
    words = [Cat(header_bytes_list[2 * i + 1], header_bytes_list[2 * i]) for i in range(10)]
    total = sum(words)              # at most 20 bits
    once = total[0:16] + total[16:]
    twice = once[0:16] + once[16:]
    return ~twice[0:16]


def serialize_header(m, hdr, window_bytes):
    """The header bytes of record ``hdr`` (lane 0 first) and their length, as new signals."""
    header = Signal(8 * window_bytes)
    length = Signal(8)
    layout = Signal(2)
    nbytes_of = {name: header_bytes(table) for name, table in
                 (("deth", DETH), ("reth", RETH), ("aeth", AETH), ("immdt", IMMDT), ("ieth", IETH))}

    def place(offset, byte_list):
        return [header[8 * (offset + i):8 * (offset + i + 1)].eq(b) for i, b in enumerate(byte_list)]

    tos = Cat(hdr.ip_ecn, hdr.ip_dscp)
    m.d.comb += layout.eq(Cat(hdr.vlan_valid, hdr.ip_version == 6))
    for vlan in (0, 1):
        for ipv6 in (0, 1):
            with m.If((hdr.vlan_valid == vlan) & ((hdr.ip_version == 6) == ipv6)):
                eth = [*_pack([("dst", 48)], {"dst": hdr.eth_dst}), *_pack([("src", 48)], {"src": hdr.eth_src})]
                if vlan:
                    eth += _pack([("tpid", 16), ("tci", 16)], {"tpid": C(ETHERTYPE_VLAN, 16), "tci": hdr.vlan_tci})
                eth += _pack([("type", 16)], {"type": hdr.ethertype})
                if ipv6:
                    ip = _pack(IPV6_HEADER, {
                        "version": C(6, 4), "traffic_class": tos, "flow_label": hdr.ip_flow_label,
                        "payload_length": hdr.ip_len, "next_header": hdr.ip_proto, "hop_limit": hdr.ip_ttl,
                        "src": hdr.ip_src, "dst": hdr.ip_dst})
                else:
                    fields = {
                        "version": C(4, 4), "ihl": C(5, 4), "dscp": hdr.ip_dscp, "ecn": hdr.ip_ecn,
                        "total_length": hdr.ip_len, "identification": hdr.ip_id,
                        "flags_fragment": hdr.ip_flags_frag, "ttl": hdr.ip_ttl, "protocol": hdr.ip_proto,
                        "src": hdr.ip_src[:32], "dst": hdr.ip_dst[:32]}
                    checksum = Signal(16)
                    m.d.comb += checksum.eq(ipv4_checksum(_pack(IPV4_HEADER, fields)))
                    ip = _pack(IPV4_HEADER, {**fields, "checksum": checksum})
                udp = _pack(UDP_HEADER, {"sport": hdr.udp_sport, "dport": hdr.udp_dport,
                                         "length": hdr.udp_len, "checksum": hdr.udp_csum})
                bth = _pack(BTH, {name: getattr(hdr, f"bth_{name}") for name, _ in BTH})
                fixed = eth + ip + udp + bth
                m.d.comb += place(0, fixed)
                after = len(fixed)
                with m.If(hdr.has_deth):
                    m.d.comb += place(after, _pack(DETH, {"qkey": hdr.deth_qkey, "src_qp": hdr.deth_src_qp}))
                with m.If(hdr.has_reth):
                    m.d.comb += place(after, _pack(RETH, {"va": hdr.reth_va, "rkey": hdr.reth_rkey,
                                                          "dma_len": hdr.reth_dma_len}))
                with m.If(hdr.has_aeth):
                    m.d.comb += place(after, _pack(AETH, {"syndrome": hdr.aeth_syndrome, "msn": hdr.aeth_msn}))
                with m.If(hdr.has_ieth):
                    m.d.comb += place(after, _pack(IETH, {"rkey": hdr.ieth_rkey}))
                imm = _pack(IMMDT, {"immdt": hdr.immdt})
                with m.If(hdr.has_immdt):
                    with m.If(hdr.has_reth):
                        m.d.comb += place(after + nbytes_of["reth"], imm)
                    with m.Elif(hdr.has_deth):
                        m.d.comb += place(after + nbytes_of["deth"], imm)
                    with m.Else():
                        m.d.comb += place(after, imm)
                extensions = sum(Mux(getattr(hdr, f"has_{name}"), size, 0) for name, size in nbytes_of.items())
                with m.If(hdr.roce):
                    m.d.comb += length.eq(after + extensions)
    return header, length, layout


def Plan(window_bytes):
    return data.StructLayout({
        "header": 8 * window_bytes,
        "length": 8,
        "layout": 2,
        "roce": 1,
        "ipv4": 1,
    })


def _side_layout(nbytes):
    return data.StructLayout({
        "beat": FrameBeat(8 * nbytes),
        "roce": 1,
        "layout": 2,
        "index": POS_BITS,              # beat index within the frame
        "icrc_here": 1,                 # the ICRC starts in this beat
        "icrc_lane": range(nbytes),     # ... at this lane
        "rewind": range(nbytes + 1),    # zero bytes after the region in this beat
        "stomp": 1,                     # invert the ICRC: the frame's verdicts were bad
        "state": 32,                    # CRC state after this beat (once computed)
    })


class RoceDeparser(wiring.Component):
    """Rebuild RoCE v2 frames from header records and payload streams; see the module docstring.

    Ports: ``hdr`` (header records in), ``i`` (payload stream in, with the verdicts on its last beat: a
    RoCE frame whose verdicts are bad leaves with its ICRC inverted), ``o`` (frames).

    ``whole_frames``: start a frame only when its payload's first beat is there. A source that then
    gives the payload at one beat per clock (the switch's stored payloads) gets frames that never
    pause in the middle, as a MAC's transmit side needs. Without it (cut-through behind the parser)
    the header beats go out while the payload is still on its way, and a frame pauses only where its
    payload does.
    """

    def __init__(self, width=64, *, whole_frames=False):
        self.width = check_width(width)
        self.whole_frames = bool(whole_frames)
        self.beat_bytes = width // 8
        self.window_bytes = window_bytes_for(width)
        self.rewind_stages = exact_log2(self.beat_bytes) + 1
        super().__init__({
            "hdr": In(header_stream()),
            "i": In(payload_stream(width)),
            "o": Out(frame_stream(width)),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes, width = self.beat_bytes, self.width
        lane_bits = exact_log2(nbytes)
        plan_layout = Plan(self.window_bytes)
        side = _side_layout(nbytes)

        # --- serialize ----------------------------------------------------------------------------
        m.submodules.plans = plans = SyncFIFOBuffered(width=plan_layout.size, depth=3)
        header, length, layout = serialize_header(m, self.hdr.payload, self.window_bytes)
        plan_in = Signal(plan_layout)
        m.d.comb += [
            plan_in.header.eq(header), plan_in.length.eq(length), plan_in.layout.eq(layout),
            plan_in.roce.eq(self.hdr.payload.roce), plan_in.ipv4.eq(self.hdr.payload.ip_version == 4),
            plans.w_data.eq(plan_in),
            plans.w_en.eq(self.hdr.valid),
            self.hdr.ready.eq(plans.w_rdy),
        ]

        # --- the ICRC pipeline: stage 0 is the merge output, the last stage feeds the output FIFO ---
        # 0: merge output, 1: masked for the ICRC, 2: CRC state, 3 .. 2 + R: rewound by bit 0 .. R - 1,
        # last: ICRC written
        stages = [Signal(side, name=f"stage{k}") for k in range(self.rewind_stages + 4)]
        valid = [Signal(name=f"stage{k}_valid") for k in range(len(stages))]

        # The pipeline never stalls: a beat enters it only with a credit for an entry of the output FIFO.
        # Credits come back one clock after ``o`` takes a beat and the FIFO shows a beat two clocks after
        # its write, so ``len(stages) + 3`` entries keep one beat per clock going; one more is spare.
        frame_fifo_depth = len(stages) + 4
        m.submodules.frames = frames = SyncFIFOBuffered(width=FrameBeat(width).size, depth=frame_fifo_depth)
        credits = Signal(range(frame_fifo_depth + 1), init=frame_fifo_depth)
        returned = Signal()
        m.d.comb += returned.eq(self.o.valid & self.o.ready)

        # --- the payload comes in through a FIFO, so that ``i.ready`` is a register compare ---------
        # (with each beat's byte count, counted on the way in rather than in the merge's loop)
        Incoming = data.StructLayout({"beat": PayloadBeat(width), "bytes": range(nbytes + 1)})
        m.submodules.payloads = payloads = SyncFIFOBuffered(width=Incoming.size, depth=4)
        m.d.comb += [payloads.w_data.eq(Cat(self.i.payload, keep_count(m, self.i.payload.keep, nbytes))),
                     payloads.w_en.eq(self.i.valid), self.i.ready.eq(payloads.w_rdy)]
        incoming_beat = data.View(Incoming, payloads.r_data)

        # --- merge --------------------------------------------------------------------------------
        active = Signal()
        held = Signal(plan_layout)
        plan = Signal(plan_layout)
        m.d.comb += plan.eq(Mux(active, held.as_value(), plans.r_data))
        have_plan = active | plans.r_rdy
        index = Signal(POS_BITS - lane_bits)    # output beat index within the frame
        pos = Signal(POS_BITS)
        m.d.comb += pos.eq(Cat(C(0, lane_bits), index))
        payload_done = Signal()
        payload_end = Signal(POS_BITS)          # position just after the payload (once done)
        stomp = Signal()                        # the frame's verdicts were bad (once done)
        frame_end = Signal(POS_BITS)            # position just after the frame (once done)
        prev = Signal(width)                    # the previous payload beat

        shift = plan.length[0:lane_bits]
        header_beats = plan.length[lane_bits:]
        beat_in = incoming_beat.beat
        in_header = index < header_beats
        consume = ~payload_done & ~in_header
        ready_to_emit = have_plan & (~consume | payloads.r_rdy)
        if self.whole_frames:
            ready_to_emit &= active | payloads.r_rdy
        emit = ready_to_emit & (credits != 0)
        m.d.sync += credits.eq(credits - emit + returned)

        nkeep = incoming_beat.bytes
        end_now = Signal(POS_BITS)
        total_now = Signal(POS_BITS)
        m.d.comb += end_now.eq(Mux(payload_done, payload_end, Cat(shift, index) + nkeep))    # pos + shift + nkeep
        ends_now = consume & beat_in.last
        known = payload_done | ends_now
        padded = Mux(end_now < ETH_MIN_FRAME - ICRC_BYTES, ETH_MIN_FRAME, end_now + ICRC_BYTES)
        m.d.comb += total_now.eq(Mux(payload_done, frame_end, Mux(plan.roce, padded, end_now)))

        # header bytes of this beat: the window at beat ``index``
        header_part = Signal(width)
        with m.Switch(index):
            for k in range(self.window_bytes // nbytes):
                with m.Case(k):
                    m.d.comb += header_part.eq(plan.header[k * width:(k + 1) * width])
        incoming = Mux(consume, beat_in.data, 0)
        payload_part = Signal(width)
        back = Signal(range(nbytes + 1))        # bytes of the previous payload beat in this beat
        m.d.comb += [back.eq(nbytes - shift), payload_part.eq(Cat(prev, incoming) >> (back * 8))]
        header_lanes = Signal(nbytes)
        payload_lanes = Signal(nbytes)
        out_keep = Signal(nbytes)
        m.d.comb += [
            header_lanes.eq(lanes_below(plan.length, index, nbytes)),
            payload_lanes.eq(Mux(known, lanes_below(end_now, index, nbytes), (1 << nbytes) - 1) & ~header_lanes),
            out_keep.eq(Mux(known, lanes_below(total_now, index, nbytes), (1 << nbytes) - 1)),
        ]
        lane_bytes = lambda lanes: Cat(*[lanes[i].replicate(8) for i in range(nbytes)])
        out_data = (header_part & lane_bytes(header_lanes)) | (payload_part & lane_bytes(payload_lanes))
        out_last = known & (total_now <= pos + nbytes)
        icrc_here = plan.roce & known & (end_now[lane_bits:] == index)     # pos <= end_now < pos + nbytes
        icrc_lane = end_now[0:lane_bits]
        verdict = beat_in.verdict
        bad_now = ~(verdict.icrc_ok & (~plan.ipv4 | verdict.ipv4_csum_ok))
        stomp_now = Mux(payload_done, stomp, bad_now)

        stage0 = stages[0]
        m.d.comb += [
            plans.r_en.eq(emit & ~active),
            payloads.r_en.eq(emit & consume),
        ]
        m.d.sync += valid[0].eq(emit)
        with m.If(emit):
            m.d.sync += [
                stage0.beat.data.eq(out_data), stage0.beat.keep.eq(out_keep),
                stage0.beat.first.eq(index == 0), stage0.beat.last.eq(out_last),
                stage0.roce.eq(plan.roce), stage0.layout.eq(plan.layout), stage0.index.eq(index),
                stage0.icrc_here.eq(icrc_here), stage0.icrc_lane.eq(icrc_lane),
                stage0.rewind.eq(nbytes - icrc_lane), stage0.stomp.eq(stomp_now),
                stomp.eq(stomp_now),
                index.eq(Mux(out_last, 0, index + 1)),
                active.eq(~out_last),
                held.eq(plan),
                payload_done.eq(known & ~out_last),
                payload_end.eq(end_now),
                frame_end.eq(total_now),
            ]
            with m.If(consume):
                m.d.sync += prev.eq(beat_in.data)
            with m.If(~consume):
                m.d.sync += prev.eq(0)

        # --- icrc ---------------------------------------------------------------------------------
        for k in range(1, len(stages)):
            m.d.sync += [valid[k].eq(valid[k - 1]), stages[k].eq(stages[k - 1])]
        # stage 1: the beat masked for the ICRC (beside the stage, which keeps the beat as it leaves)
        and_mask, or_mask = icrc_beat_masks(m, stage0.layout, stage0.index, nbytes)
        masked = Signal(width)
        m.d.sync += masked.eq((stage0.beat.data & and_mask) | or_mask)
        # stage 2: the CRC state after the beat
        crc = Signal(32)
        crc_next = crc_update(m, Mux(stages[1].beat.first, 0, crc), masked, nbytes)
        with m.If(valid[1]):
            m.d.sync += [crc.eq(crc_next), stages[2].state.eq(crc_next)]
        for bit in range(self.rewind_stages):
            src, dst = stages[2 + bit], stages[3 + bit]
            rewound = Signal(32, name=f"rewound{bit}")
            m.d.comb += rewound.eq(apply_taps(rewind_taps(1 << bit), src.state))
            m.d.sync += dst.state.eq(Mux(src.rewind[bit], rewound, src.state))

        # the last stage: write the ICRC (the complement of the rewound state, least significant byte
        # first) into its placeholder lanes, and the bytes that straddle into the next beat
        final_in = stages[-2]
        icrc = Signal(32)
        m.d.comb += icrc.eq(Mux(final_in.stomp, final_in.state, ~final_in.state))
        spill_icrc = Signal(32)
        spill_count = Signal(range(ICRC_BYTES + 1))
        out_data = Signal(width)
        m.d.comb += out_data.eq(final_in.beat.data)
        with m.If(final_in.icrc_here & final_in.roce):
            with m.Switch(final_in.icrc_lane):
                for lane in range(nbytes):
                    with m.Case(lane):
                        here = min(ICRC_BYTES, nbytes - lane)
                        m.d.comb += out_data[8 * lane:8 * (lane + here)].eq(icrc[:8 * here])
        with m.Elif(spill_count != 0):
            with m.Switch(spill_count):
                for count in range(1, ICRC_BYTES):
                    with m.Case(count):
                        m.d.comb += out_data[:8 * count].eq(spill_icrc[32 - 8 * count:])
        with m.If(valid[-2]):
            with m.If(final_in.icrc_here & final_in.roce):
                m.d.sync += [
                    spill_icrc.eq(icrc),
                    spill_count.eq(Mux(final_in.icrc_lane + ICRC_BYTES > nbytes,
                                       final_in.icrc_lane + ICRC_BYTES - nbytes, 0)),
                ]
            with m.Else():
                m.d.sync += spill_count.eq(0)
            m.d.sync += stages[-1].beat.data.eq(out_data)

        m.d.comb += [
            frames.w_en.eq(valid[-1]),
            frames.w_data.eq(stages[-1].beat),
            self.o.valid.eq(frames.r_rdy),
            self.o.payload.eq(frames.r_data),
            frames.r_en.eq(self.o.ready),
        ]
        return m
