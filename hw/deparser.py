"""RoCE v2 deparser: a header record and a payload stream back into a frame, with a fresh ICRC.

Behaviour: docs/ARCHITECTURE.md, "Deparser contract". Structure (one output beat per clock, with no
bubbles between back-to-back frames):

``serialize``  takes each header record from a FIFO and turns it into the bytes of its headers and
               their length, with the sum of the IPv4 header's words in three parts, two adders
               deep each (added as the merge takes the plan, and the checksum folded from that sum
               when it builds the beat that holds it); one record per clock into the plan FIFO;
``merge``      emits the frame beat by beat: whole header beats, then header tail and payload merged at
               the header length's byte offset, then the payload's last bytes, zero placeholders for
               the ICRC and zero Ethernet padding up to 60 bytes (with ``whole_frames``, a frame
               starts only once its payload's first beat is there). A loop decides which beat comes
               next from registers and small precomputed facts (the beats left after the payload's
               end, whether the last payload beat's bytes leave the ICRC in its beat); a clock later a
               stage builds that beat (lanes, merged bytes) from what the loop registered;
``icrc``       a pipeline beside the frame: masks the ICRC fields, accumulates the CRC, *rewinds* the
               state over the zero bytes after the region in the beat that holds the ICRC (one fixed
               matrix per bit of that count, one stage each), and writes the ICRC into its placeholder,
               spilling into the next beat when it straddles two.

No ``ready`` is a chain through the stages: the header records come in through a register of one entry
(``hdr.ready``: it is empty or the plan FIFO has room, both registers) and the payload through a FIFO
(``i.ready``: its registered room), the ICRC pipeline never stalls, and its beats
go into an output FIFO that the merge stage may fill only while it holds a credit (one per free entry,
counted in a register), so ``o.ready`` reaches nothing but that FIFO.
"""

from amaranth.hdl import Array, C, Cat, Module, Mux, Signal
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
    ETHERTYPE_VLAN,
    ICRC_BYTES,
    IETH,
    IMMDT,
    IPV4_HEADER,
    IPV6_HEADER,
    RETH,
    UDP_HEADER,
    field_offsets,
    header_bytes,
)
from .crc import apply_taps, crc_update, icrc_beat_masks, rewind_taps
from .parser import POS_BITS, keep_count, window_bytes_for
from .ram import RegisterFIFO
from .stream import FrameBeat, ParsedHeader, PayloadBeat, check_width, frame_stream, header_stream, payload_stream

__all__ = ["RoceDeparser", "serialize_header", "lanes_below", "ones_complement_fold"]


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


def _ipv4_words(header_bytes_list):
    return [Cat(header_bytes_list[2 * i + 1], header_bytes_list[2 * i]) for i in range(10)]


def _adder_tree(terms):
    """The sum of ``terms``, a balanced tree of adders (a running sum would chain them)."""
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def ipv4_sum(header_bytes_list):
    """The sum of the 10 words of 20 IPv4 header bytes (at most 20 bits), before the ones' complement fold:
    a balanced tree of adders, four deep."""
    return _adder_tree(_ipv4_words(header_bytes_list))


IPV4_SUM_PARTS = (4, 3, 3)      # the words of each of ``ipv4_sum_parts``'s sums: two adders deep each
IPV4_SUM_PART_BITS = (0xFFFF * max(IPV4_SUM_PARTS)).bit_length()      # the widest part's sum


def ipv4_sum_parts(header_bytes_list):
    """``ipv4_sum`` in ``len(IPV4_SUM_PARTS)`` parts, each the sum of the next ``IPV4_SUM_PARTS[i]`` words
    (at most ``IPV4_SUM_PART_BITS``): their sum is ``ipv4_sum``, two adders after them."""
    words, parts = _ipv4_words(header_bytes_list), []
    for count in IPV4_SUM_PARTS:
        parts.append(_adder_tree(words[:count]))
        words = words[count:]
    assert not words
    return parts


def ones_complement_fold(total):
    """``total``'s carries out of 16 bits added back into its low 16 bits once (a ones' complement sum of
    16-bit words is folded so until it fits in 16 bits)."""
    return total[0:16] + total[16:]


def checksum_of_sum(total):
    """The IPv4 header checksum from the sum of the header's words (its checksum bytes zero)."""
    return ~ones_complement_fold(ones_complement_fold(total))[0:16]


def ipv4_checksum(header_bytes_list):
    """The IPv4 header checksum of 20 header bytes whose checksum bytes are zero."""
    return checksum_of_sum(ipv4_sum(header_bytes_list))


IPV4_SUM_BITS = 20
# where the IPv4 header checksum is in a frame without and with a VLAN tag
IPV4_CHECKSUM_AT = [header_bytes(ETH_HEADER) + 4 * vlan + field_offsets(IPV4_HEADER)["checksum"][0] // 8
                    for vlan in (0, 1)]


def serialize_header(m, hdr, window_bytes, ipv6=True):
    """The header bytes of record ``hdr`` (lane 0 first), their length, their layout and the sum of the IPv4
    header's words in parts (``ipv4_sum_parts``), as new signals. The IPv4 checksum bytes are left zero: the
    checksum is the ones' complement fold (``checksum_of_sum``) of the parts' sum, which the deparser works
    out later. Without ``ipv6``, the layouts of RoCE over IPv6 are left out."""
    header = Signal(8 * window_bytes)
    length = Signal(8)
    layout = Signal(2)
    ip_sum_parts = Signal(data.ArrayLayout(IPV4_SUM_PART_BITS, len(IPV4_SUM_PARTS)))
    nbytes_of = {name: header_bytes(table) for name, table in
                 (("deth", DETH), ("reth", RETH), ("aeth", AETH), ("immdt", IMMDT), ("ieth", IETH))}

    def place(offset, byte_list):
        return [header[8 * (offset + i):8 * (offset + i + 1)].eq(b) for i, b in enumerate(byte_list)]

    tos = Cat(hdr.ip_ecn, hdr.ip_dscp)
    # (the IPv4 header's sum whatever the layout, from the record's fields: no layout's multiplexer on its
    # way; it is used only where the layout is IPv4. In parts, two adders deep: the plan FIFO takes them)
    ipv4 = _pack(IPV4_HEADER, {
        "version": C(4, 4), "ihl": C(5, 4), "dscp": hdr.ip_dscp, "ecn": hdr.ip_ecn, "total_length": hdr.ip_len,
        "identification": hdr.ip_id, "flags_fragment": hdr.ip_flags_frag, "ttl": hdr.ip_ttl,
        "protocol": hdr.ip_proto, "src": hdr.ip_src[:32], "dst": hdr.ip_dst[:32]})
    m.d.comb += [ip_sum_parts[i].eq(part) for i, part in enumerate(ipv4_sum_parts(ipv4))]
    over_ipv6 = hdr.ip_version == 6
    m.d.comb += layout.eq(Cat(hdr.vlan_valid, over_ipv6 if ipv6 else 0))
    for vlan in (0, 1):
        for v6 in (0, 1) if ipv6 else (0,):
            with m.If((hdr.vlan_valid == vlan) & (over_ipv6 == v6) if ipv6 else hdr.vlan_valid == vlan):
                eth = [*_pack([("dst", 48)], {"dst": hdr.eth_dst}), *_pack([("src", 48)], {"src": hdr.eth_src})]
                if vlan:
                    eth += _pack([("tpid", 16), ("tci", 16)], {"tpid": C(ETHERTYPE_VLAN, 16), "tci": hdr.vlan_tci})
                eth += _pack([("type", 16)], {"type": hdr.ethertype})
                if v6:
                    ip = _pack(IPV6_HEADER, {
                        "version": C(6, 4), "traffic_class": tos, "flow_label": hdr.ip_flow_label,
                        "payload_length": hdr.ip_len, "next_header": hdr.ip_proto, "hop_limit": hdr.ip_ttl,
                        "src": hdr.ip_src, "dst": hdr.ip_dst})
                else:
                    ip = ipv4
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
                # the headers' length: a table of this layout's lengths over the extension flags (a sum of the
                # extensions' sizes would be a chain of adders)
                flags = Cat(*[getattr(hdr, f"has_{name}") for name in nbytes_of])
                lengths = Array(C(after + sum(size for k, size in enumerate(nbytes_of.values()) if index >> k & 1), 8)
                                for index in range(1 << len(nbytes_of)))
                with m.If(hdr.roce):
                    m.d.comb += length.eq(lengths[flags])
    return header, length, layout, ip_sum_parts


def Plan(window_bytes, nbytes):
    return data.StructLayout({
        "header": 8 * window_bytes,
        "length": 8,
        "layout": 2,
        "roce": 1,
        "ipv4": 1,
        "icrc_room": range(nbytes),     # a last payload beat of fewer bytes leaves the ICRC in its beat
        # the IPv4 header's words summed (its checksum bytes are zero), in parts (``ipv4_sum_parts``)
        "ip_sum_parts": data.ArrayLayout(IPV4_SUM_PART_BITS, len(IPV4_SUM_PARTS)),
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

    ``ipv6``: RoCE over IPv6 is serialized. Without it, the deparser takes the records of a parser built
    without it (``RoceParser(ipv6=False)``), in which no IPv6 frame is RoCE.
    """

    def __init__(self, width=64, *, whole_frames=False, ipv6=True):
        self.width = check_width(width)
        self.whole_frames = bool(whole_frames)
        self.ipv6 = bool(ipv6)
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
        plan_layout = Plan(self.window_bytes, nbytes)
        side = _side_layout(nbytes)

        # --- serialize ----------------------------------------------------------------------------
        # Each header record comes in through a register of one entry, so that the serializer starts from
        # a register; it writes one plan per clock into the plan FIFO. The register takes a record in the
        # clock it passes its own on, so ``hdr.ready`` is an OR of two registers (it empty; the plan FIFO's
        # registered room). A FIFO here would hold its records in distributed RAM: at 968 bits, some 1,450
        # ECP5 logic cells. The merge takes the FIFO's head into a register of its own (``plan``) when that is
        # empty and as a frame's last beat goes, so where no frame is one beat (below 512 bits) a FIFO of one
        # entry, written again a clock later, has the plan after next before the next frame ends; frames of
        # one beat, one a clock, need two.
        record = Signal(ParsedHeader, reset_less=True)      # (data, qualified by ``record_valid``: no reset)
        record_valid = Signal()
        plan_entries = 2 if nbytes >= ETH_MIN_FRAME else 1
        m.submodules.plans = plans = RegisterFIFO(width=plan_layout.size, depth=plan_entries)
        m.d.comb += self.hdr.ready.eq(~record_valid | plans.w_rdy)
        with m.If(self.hdr.ready):
            m.d.sync += [record.eq(self.hdr.payload), record_valid.eq(self.hdr.valid)]
        header, length, layout, ip_sum_parts = serialize_header(m, record, self.window_bytes, self.ipv6)
        plan_in = Signal(plan_layout)
        m.d.comb += [
            plan_in.header.eq(header), plan_in.length.eq(length), plan_in.layout.eq(layout),
            plan_in.roce.eq(record.roce), plan_in.ipv4.eq(record.ip_version == 4),
            plan_in.ip_sum_parts.eq(ip_sum_parts),
            # (a table over the length's lane: no arithmetic on the way into the plan)
            plan_in.icrc_room.eq(Array(C(max(0, nbytes - (ICRC_BYTES - 1) - lane), len(plan_in.icrc_room))
                                       for lane in range(nbytes))[length[0:lane_bits]]),
            plans.w_data.eq(plan_in),
            plans.w_en.eq(record_valid),
        ]

        # --- the ICRC pipeline: stage 0 is the merge output, the last stage feeds the output FIFO ---
        # 0: merge output, 1: masked for the ICRC, 2: CRC state, 3 .. 2 + R: rewound by bit 0 .. R - 1,
        # last: ICRC written
        stages = [Signal(side, name=f"stage{k}") for k in range(self.rewind_stages + 4)]
        valid = [Signal(name=f"stage{k}_valid") for k in range(len(stages))]

        # The pipeline never stalls: a beat enters it only with a credit for an entry of the output FIFO.
        # A beat enters the stages a clock after the merge loop takes its credit (``decided``), credits
        # come back one clock after ``o`` takes a beat and the FIFO shows a beat two clocks after its
        # write, so ``len(stages) + 4`` entries keep one beat per clock going; one more is spare.
        frame_fifo_depth = len(stages) + 5
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

        # --- merge: a loop that decides which beat comes next, and a stage that builds that beat ------
        # The loop holds only what the next beat depends on: its index, whether the frame goes on, whether
        # the payload has ended and how many beats follow its end. Where the payload and the frame end is
        # counted relative to the beat (small sums, not positions in the frame), and the beat's lanes and
        # merged bytes are worked out a clock later from what the loop registered (``decided``).
        # The plan of the frame being sent, or of the next to start, is in ``plan``, a register that takes
        # the plan FIFO's head when it is empty and in the clock a frame's last beat goes, so that the loop
        # reads one register rather than a choice between it and the FIFO.
        active = Signal()                       # a frame is being sent (its first beat has gone)
        plan = Signal(plan_layout, reset_less=True)        # (data, qualified by ``have_plan``: no reset)
        # the plan's IPv4 header sum, its parts added as it is taken (the serializer adds only within each)
        ip_sum = Signal(IPV4_SUM_BITS, reset_less=True)
        have_plan = Signal()
        index = Signal(POS_BITS - lane_bits)    # output beat index within the frame
        in_header = Signal()                    # beat ``index`` holds no payload byte
        in_header_next = Signal()               # ... nor does beat ``index + 1`` (once active)
        payload_done = Signal()
        stomp = Signal()                        # the frame's verdicts were bad (once done)
        after_end = Signal(range(3))            # beats still to come after the payload ended (once done)
        # bytes from the start of the next beat to the payload's end and to the frame's end (once done)
        rel_range = range(-3 * nbytes, 2 * nbytes + ETH_MIN_FRAME)
        payload_end_next = Signal(rel_range)
        frame_end_next = Signal(rel_range)

        # The beats that follow the one holding the payload's last byte: those the ICRC reaches into, or
        # one to pad a short frame to 60 bytes. A RoCE frame's payload starts at or after byte 54 (the
        # shortest headers), so padding adds at most one beat, and only where the ICRC adds none; a
        # payload that ends in the 60-byte frame's last beat is padded within that beat.
        min_last = (ETH_MIN_FRAME - 1) >> lane_bits
        shortest_headers = (header_bytes(ETH_HEADER) + header_bytes(IPV4_HEADER) + header_bytes(UDP_HEADER)
                            + header_bytes(BTH))
        assert min_last - (shortest_headers >> lane_bits) <= 1
        past_min = Signal(init=min_last == 0)   # beat ``index`` is at or past the 60-byte frame's last
        padded_here = ETH_MIN_FRAME - (min_last - 1) * nbytes     # a padded frame's end from beat min_last - 1
        padded_at_min = ETH_MIN_FRAME - min_last * nbytes         # ... from beat min_last (1 .. nbytes)

        shift = plan.length[0:lane_bits]
        beat_in = incoming_beat.beat
        nkeep = incoming_beat.bytes
        m.d.comb += in_header.eq(Mux(active, in_header_next, plan.length[lane_bits:] != 0))
        consume = ~payload_done & ~in_header
        ready_to_emit = have_plan & (~consume | payloads.r_rdy)
        if self.whole_frames:
            ready_to_emit &= active | payloads.r_rdy
        emit = ready_to_emit & (credits != 0)
        m.d.sync += credits.eq(credits - emit + returned)

        ends_now = consume & beat_in.last
        known = payload_done | ends_now
        payload_here = Signal(range(2 * nbytes))        # the payload's end from the beat's start, if it ends
        m.d.comb += payload_here.eq(shift + nkeep)
        icrc_beats = Signal(range(3))                   # beats after this one that the ICRC reaches into
        m.d.comb += icrc_beats.eq((payload_here + (ICRC_BYTES - 1)) >> lane_bits)
        beats_after = Signal(range(3))                  # (a non-RoCE plan has length 0: its payload ends here)
        m.d.comb += beats_after.eq(Mux(plan.roce, Mux(icrc_beats != 0, icrc_beats, ~past_min), 0))
        ends_here = ~plan.roce | (past_min & (nkeep < plan.icrc_room))     # beats_after == 0, with no sum
        out_last = Mux(payload_done, after_end == 1, ends_now & ends_here)

        frame_here = Signal(range(2 * nbytes + ETH_MIN_FRAME))
        with m.If(~plan.roce):
            m.d.comb += frame_here.eq(payload_here)
        with m.Elif(~past_min & (payload_here < padded_here - ICRC_BYTES)):
            m.d.comb += frame_here.eq(padded_here)
        with m.Elif((index == min_last) & (payload_here < padded_at_min - ICRC_BYTES)):
            # the payload ends in the 60-byte frame's last beat, short of 56 bytes (from 128 bits up,
            # where that beat starts before byte 56): the padding stays in this beat
            m.d.comb += frame_here.eq(padded_at_min)
        with m.Else():
            m.d.comb += frame_here.eq(payload_here + ICRC_BYTES)
        payload_end = Signal(rel_range)                 # from this beat's start (once known)
        frame_end = Signal(rel_range)
        m.d.comb += [payload_end.eq(Mux(payload_done, payload_end_next, payload_here)),
                     frame_end.eq(Mux(payload_done, frame_end_next, frame_here))]
        verdict = beat_in.verdict
        bad_now = ~(verdict.icrc_ok & (~plan.ipv4 | verdict.ipv4_csum_ok))
        stomp_now = Mux(payload_done, stomp, bad_now)

        # header bytes of this beat: the window at beat ``index`` (the switch looks at the low bits of the
        # index only: past the window, the header lanes are none)
        header_part = Signal(width)
        window_beats = self.window_bytes // nbytes
        with m.Switch(index[:max(1, (window_beats - 1).bit_length())]):
            for k in range(window_beats):
                with m.Case(k):
                    m.d.comb += header_part.eq(plan.header[k * width:(k + 1) * width])
        # ... with the IPv4 checksum (big-endian), folded from the plan's sum here rather than in the
        # serializer behind the sum
        checksum = Signal(16)
        m.d.comb += checksum.eq(checksum_of_sum(ip_sum))
        for vlan, at in enumerate(IPV4_CHECKSUM_AT):
            beat, lane = divmod(at, nbytes)
            assert lane + 2 <= nbytes
            with m.If((plan.layout == vlan) & (index == beat)):        # IPv4 (layout bit 1 clear)
                m.d.comb += header_part[8 * lane:8 * (lane + 2)].eq(Cat(checksum[8:16], checksum[0:8]))

        Decided = data.StructLayout({
            "index": POS_BITS - lane_bits, "first": 1, "last": 1, "known": 1, "stomp": 1,
            "roce": 1, "layout": 2,
            "header_lanes": nbytes,
            "back": range(nbytes + 1),          # bytes of the previous payload beat in this beat
            "payload_end": rel_range,           # from the beat's start (once known)
            "frame_end": rel_range,
            "header": width,                    # the header window at ``index``
            "incoming": width,                  # the payload beat taken (zero if none)
        })
        decided = Signal(Decided)
        decided_valid = Signal()
        refill = ~have_plan | (emit & out_last)
        m.d.comb += [
            plans.r_en.eq(refill),
            payloads.r_en.eq(emit & consume),
        ]
        head = data.View(plan_layout, plans.r_data)
        with m.If(refill):
            m.d.sync += [plan.eq(plans.r_data), have_plan.eq(plans.r_rdy),
                         ip_sum.eq(sum(head.ip_sum_parts[i] for i in range(len(IPV4_SUM_PARTS))))]
        m.d.sync += decided_valid.eq(emit)
        with m.If(emit):
            m.d.sync += [
                decided.index.eq(index), decided.first.eq(index == 0), decided.last.eq(out_last),
                decided.known.eq(known), decided.stomp.eq(stomp_now),
                decided.roce.eq(plan.roce), decided.layout.eq(plan.layout),
                decided.header_lanes.eq(lanes_below(plan.length, index, nbytes)),
                decided.back.eq(nbytes - shift),
                decided.payload_end.eq(payload_end), decided.frame_end.eq(frame_end),
                decided.header.eq(header_part), decided.incoming.eq(Mux(consume, beat_in.data, 0)),
                stomp.eq(stomp_now),
                index.eq(Mux(out_last, 0, index + 1)),
                active.eq(~out_last),
                in_header_next.eq(index + 1 < plan.length[lane_bits:]),
                payload_done.eq(known & ~out_last),
                after_end.eq(Mux(payload_done, after_end - 1, beats_after)),
                payload_end_next.eq(payload_end - nbytes),
                frame_end_next.eq(frame_end - nbytes),
            ]
            if min_last:
                m.d.sync += past_min.eq(Mux(out_last, 0, past_min | (index == min_last - 1)))

        # the beat: header lanes below the header length, payload lanes up to the payload's end (the
        # previous payload beat's tail, then the current beat's head), zero lanes up to the frame's end
        prev = Signal(width)                    # the previous payload beat (zero after the payload)
        with m.If(decided_valid):
            m.d.sync += prev.eq(decided.incoming)
        payload_part = Signal(width)
        m.d.comb += payload_part.eq(Cat(prev, decided.incoming) >> (decided.back * 8))
        header_lanes = decided.header_lanes
        payload_lanes = Signal(nbytes)
        out_keep = Signal(nbytes)
        all_lanes = (1 << nbytes) - 1
        partial_lanes = Array(C((1 << count) - 1, nbytes) for count in range(nbytes))

        def below(end):                 # the lanes before byte ``end`` (from the beat's start): a table
            ahead = end[lane_bits:]     # ... and the beat of ``end`` relative to this one (its sign bit, and
            here = ahead == 0           # whether it is 0, rather than a signed comparison's carry chain)
            return Mux(ahead[-1], 0, Mux(here, partial_lanes[end[:lane_bits]], all_lanes))

        m.d.comb += [
            payload_lanes.eq(Mux(decided.known, below(decided.payload_end), all_lanes) & ~header_lanes),
            out_keep.eq(Mux(decided.known, below(decided.frame_end), all_lanes)),
        ]

        def lane_bytes(lanes):
            return Cat(*[lanes[i].replicate(8) for i in range(nbytes)])

        out_data = (decided.header & lane_bytes(header_lanes)) | (payload_part & lane_bytes(payload_lanes))
        icrc_here = decided.roce & decided.known & (decided.payload_end[lane_bits:] == 0)
        icrc_lane = decided.payload_end[0:lane_bits]

        stage0 = stages[0]
        m.d.sync += valid[0].eq(decided_valid)
        with m.If(decided_valid):
            m.d.sync += [
                stage0.beat.data.eq(out_data), stage0.beat.keep.eq(out_keep),
                stage0.beat.first.eq(decided.first), stage0.beat.last.eq(decided.last),
                stage0.roce.eq(decided.roce), stage0.layout.eq(decided.layout), stage0.index.eq(decided.index),
                stage0.icrc_here.eq(icrc_here), stage0.icrc_lane.eq(icrc_lane),
                stage0.rewind.eq(nbytes - icrc_lane), stage0.stomp.eq(decided.stomp),
            ]

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
