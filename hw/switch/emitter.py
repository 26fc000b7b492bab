"""The switch's frames out, from the monitor's descriptors (``Emitter``).

The monitor decides, in the order of the frames it takes, what leaves the switch, and writes each decision
as a *descriptor* (``Emitter.Descriptor``) of one of four kinds (``Emission``); the emitter turns the
descriptors, in that order, into the header records and payload streams that ``hw.deparser.RoceDeparser``
serializes (docs/ARCHITECTURE.md, "Switch behaviour, per received frame": what each outcome sends):

- ``FORWARD``: a frame that goes on (a pass-through, an ACK, a frame of no connection): its header record
  from ``headers`` (``records.HeaderRecords``: the records of the frames that go on, in the same order) and
  its payload words from the packet ring (``ring``, ``beats`` of them from ``ring_read`` on);
- ``DUPLICATE``: the answer to a duplicate: its header record from ``headers`` and the stored sum
  (``results`` at result slot ``rslot``), a first packet's own 16 bytes (``own``) over its start;
- ``RESULTS``: a packet slot's sum, once to each of the job's ``workers`` (``all``) or to ``worker`` (a
  resend): each worker's stored header (``store_header``: a ``StoredHeader``, its record but for what its
  connection fixes, which ``restore_header`` puts back) and the sum with that worker's own 16 bytes
  (``store_own``) over a first packet's start. A bounded-loss result (``lossy``) is built from the template
  worker's (``template``) stored header, addressed from the worker's requester to its responder, with the
  connection's next PSN (``sent + 1``, used up: ``psn_used``), the responder's R_Key and the contributor
  bitmap as immediate; its class marks it ``lossy`` for the egress stage. Every sum is taken from
  ``sum_done`` before its frames (sums finish in the order of their RESULTS descriptors), and a RESULTS
  descriptor that is not a resend is taken only once ``stored`` has said that its contributions' headers are
  in the store (one strobe a descriptor, in their order);
- ``CREDITS``: a CREDIT control frame (``netreduce.host.protocol.build_control_frame``) from the switch to
  each of the job's requesters (``all``) or to ``worker``'s, granting ``value``.

Two sequencers walk the descriptors in the same order. The payload sequencer takes each descriptor first
and queues it for the header sequencer (``header_jobs``); it streams the payloads on ``payload``, one word
a clock, on credits for the FIFO in front of ``payload``, so that nothing it decides waits on the deparser
taking a word. The header sequencer hands every frame's header record to ``hdr`` as early as it can (and
the frame's class to ``classes`` in the same clock, for ``forwarding.ForwardingTable``: its DSCP, a
CREDIT's ``CONTROL_DSCP``, 0 where the parser found no IP header, and the record's destination MAC). The
payloads lead: the deparser starts a frame only once its first payload word is there (``whole_frames``)
and holds three records at most, so payloads issued behind their headers made a loop: four 1-beat frames
in the nine clocks from a descriptor's take to its payload's arrival in the deparser. ``results_sent``
marks the clock the last word of a RESULTS descriptor is issued (the message's count in
``unsent.UnsentResults`` goes down), ``frame_out`` each header handed over (``frames_out``).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...registers import CONNECTION
from ...wire import (
    CONTROL_DSCP,
    CONTROL_MAGIC,
    CONTROL_VERSION,
    ETH_MIN_FRAME,
    ETHERTYPE_IPV4,
    PARSED_HEADER_FIELDS,
    ROCE_UDP_PORT,
    ControlType,
)
from ..csr import block_write_layout
from ..deparser import lanes_below, ones_complement_fold
from ..slots import result_read_signature, sum_done_layout
from ..stream import ParsedHeader, PayloadBeat, check_width
from .connection_table import ConnectionTable
from .forwarding import FrameDestination
from .registers import JobEntry, SwitchAddress, fields_of
from .unsent import message_strobe_layout

__all__ = ["Emitter", "Emission", "HeaderEntry", "StoredHeader", "stored_header", "stored_header_fields",
           "restore_header", "OWN_BYTES", "GOOD_VERDICT", "stored_beat_layout", "frame_words",
           "ring_address_bits", "descriptor_layout", "psn_used_layout"]

OWN_BYTES = 16              # the aggregation header: a first packet's own bytes in its results
_UDP = 17                   # the IPv4 protocol number of UDP
GOOD_VERDICT = 0b111        # icrc_ok, ipv4_csum_ok, len_ok

# The header store keeps, of each contribution's header record, what its connection does not fix. The match
# bound the frame to the connection (``match.ConnectionMatch``: its data key and binding): it is RoCE over
# IPv4 (so UDP to port 4791, with no flow label), from the requester's MAC, IPv4 address and VLAN (the VID:
# the priority and DEI are kept), to the responder's MAC, IPv4 address and QP. The emitter puts those back
# from the connection's configuration (``restore_header``). Of the 968 bits of a record, 514 are kept.
CONNECTION_FIXED = ("roce", "eth_dst", "eth_src", "vlan_valid", "ethertype", "ip_version", "ip_proto",
                    "ip_flow_label", "ip_src", "ip_dst", "udp_dport", "bth_dest_qp")
StoredHeader = data.StructLayout({
    **{name: width for name, width in PARSED_HEADER_FIELDS if name not in CONNECTION_FIXED and name != "vlan_tci"},
    "vlan_priority": 4,     # the VLAN tag's PCP and DEI (its top four bits); the VID is the connection's
})
_VID_BITS = 12

# the header store: each contribution's header (``StoredHeader``) and its first 16 payload bytes
HeaderEntry = data.StructLayout({"header": StoredHeader, "own": 8 * OWN_BYTES})


def stored_header(header):
    """The ``StoredHeader`` value of a ``ParsedHeader`` view (what the monitor writes into the store)."""
    return Cat(*[header.vlan_tci[_VID_BITS:] if name == "vlan_priority" else getattr(header, name)
                 for name in StoredHeader.members])


def stored_header_fields(header):
    """``stored_header`` of a header record given as a dict of ints (the golden model's)."""
    return {name: header["vlan_tci"] >> _VID_BITS if name == "vlan_priority" else header[name]
            for name in StoredHeader.members}


def restore_header(m, record, stored, *, requester_mac, requester_ip, requester_vlan, responder_mac, responder_ip,
                   responder_qpn):
    """Drive the ``ParsedHeader`` ``record`` from a ``StoredHeader`` and its connection's configuration (the VLAN
    as ``registers.vlan_of``)."""
    m.d.comb += [getattr(record, name).eq(getattr(stored, name))
                 for name in StoredHeader.members if name != "vlan_priority"]
    m.d.comb += [
        record.roce.eq(1), record.ethertype.eq(ETHERTYPE_IPV4), record.ip_version.eq(4),
        record.ip_proto.eq(_UDP), record.udp_dport.eq(ROCE_UDP_PORT), record.ip_flow_label.eq(0),
        record.eth_src.eq(requester_mac), record.ip_src.eq(requester_ip),
        record.vlan_valid.eq(requester_vlan[_VID_BITS]),
        record.vlan_tci.eq(Cat(requester_vlan[:_VID_BITS], stored.vlan_priority)),
        record.eth_dst.eq(responder_mac), record.ip_dst.eq(responder_ip), record.bth_dest_qp.eq(responder_qpn),
    ]


class Emission(enum.Enum, shape=2):
    """What a descriptor sends (the module's docstring)."""
    FORWARD = 0
    DUPLICATE = 1
    RESULTS = 2
    CREDITS = 3


def stored_beat_layout(width):
    """A payload word in the packet ring, with its frame's verdict on its last word."""
    return data.StructLayout({"data": width, "keep": width // 8, "last": 1, "verdict": 3})


def frame_words(width, max_frame):
    """Words of the longest payload stream, ``max_frame`` bytes."""
    return -(-max_frame // (width // 8))


def ring_address_bits(frame_beats):
    """Address bits of the packet ring, which holds two of the longest payloads."""
    return ceil_log2(2 * frame_beats + 2)


def descriptor_layout(*, workers, jobs, message_slots, slots, frame_beats):
    """A descriptor (the module's docstring), for the switch's geometry."""
    slot_bits = max(1, ceil_log2(slots))
    worker_bits = max(1, ceil_log2(workers))
    return data.StructLayout({
        "kind": Emission,
        "slot": slot_bits, "rslot": slot_bits + 1, "index0": 1, "beats": range(frame_beats + 1),
        "length": 16, "own": 8 * OWN_BYTES,
        "job": max(1, ceil_log2(jobs)), "k": max(1, ceil_log2(message_slots)), "workers": worker_bits + 1,
        "worker": worker_bits, "all": 1,
        "value": 32,
        # a bounded-loss result: built from the template's stored header for each receiver, the contributor
        # bitmap its immediate; ``resend``: to one receiver again, from a finished sum
        "lossy": 1, "resend": 1, "bitmap": workers, "template": worker_bits,
    })


def psn_used_layout(connections):
    """A bounded-loss result took its connection's next PSN (``psn_used``) in the sequence ``sent`` holds: the
    emitter says so only where the connection's epoch (``sent_epochs``, which changes as the connection
    restarts) is the one it read with the PSN, so that a PSN read before a restart does not count after it."""
    return data.StructLayout({"valid": 1, "conn": max(1, ceil_log2(connections))})


class Emitter(wiring.Component):
    """``Emitter(*, width, workers, jobs, message_slots, slots, packet_beats, max_frame, bounded_loss=True)``: the
    switch's ``slots`` packet slots of ``packet_beats`` words, its frames of up to ``max_frame`` payload bytes;
    without ``bounded_loss`` (a build without the class) no descriptor is a bounded-loss result or resend.
    Attributes the monitor builds on: ``Descriptor``, ``StoredBeat``, ``frame_beats`` (words of the longest
    payload), ``ring_bits`` (address bits of the packet ring, which holds two such payloads)."""

    OUTGOING_DEPTH = 8      # credits return three clocks after an issue at the earliest, plus the FIFO

    def __init__(self, *, width, workers, jobs, message_slots, slots, packet_beats, max_frame, bounded_loss=True):
        check_width(width)
        self.width, self.workers, self.jobs_count, self.message_slots = width, workers, jobs, message_slots
        self.bounded_loss = bounded_loss
        self.slots, self.packet_beats, self.max_frame = slots, packet_beats, max_frame
        self.beat_bytes = width // 8
        self.connections_count = C = jobs * workers
        self.frame_beats = frame_words(width, max_frame)
        self.ring_bits = ring_address_bits(self.frame_beats)
        self.StoredBeat = stored_beat_layout(width)
        self.Descriptor = descriptor_layout(workers=workers, jobs=jobs, message_slots=message_slots, slots=slots,
                                            frame_beats=self.frame_beats)
        store_bits = ceil_log2(slots * workers)
        super().__init__({
            "descriptors": In(stream.Signature(self.Descriptor)),
            "headers": In(stream.Signature(ParsedHeader)),
            "stored": In(1),
            "sum_done": In(stream.Signature(sum_done_layout(slots))),
            "results": Out(result_read_signature(width, slots, packet_beats)),
            "ring": In(ReadPort.Signature(addr_width=self.ring_bits, shape=self.StoredBeat)),
            "ring_read": Out(self.ring_bits + 1),
            "store_header": In(ReadPort.Signature(addr_width=store_bits, shape=StoredHeader)),
            "store_own": In(ReadPort.Signature(addr_width=store_bits, shape=8 * OWN_BYTES)),
            "hdr": Out(stream.Signature(ParsedHeader)),
            "classes": Out(stream.Signature(FrameDestination)),
            "payload": Out(stream.Signature(PayloadBeat(width))),
            "switch": In(SwitchAddress),
            "jobs": In(data.ArrayLayout(JobEntry, jobs)),
            "connection_write": In(block_write_layout(CONNECTION, C)),
            "sent": In(data.ArrayLayout(24, C)),
            "sent_epochs": In(C),
            "psn_used": Out(psn_used_layout(C)),
            "results_sent": Out(message_strobe_layout(jobs * message_slots)),
            "frame_out": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, B, N, K = self.width, self.beat_bytes, self.workers, self.message_slots
        C = self.connections_count
        Descriptor = self.Descriptor
        FORWARD, DUPLICATE, RESULTS, CREDITS = Emission
        # the connections' fields, each read by the sequencer that needs it (``ConnectionTable``): a result's
        # addresses by the header sequencer, a CREDIT's requester by the payload sequencer
        m.submodules.result_connections = result_connections = ConnectionTable(
            connections=C, registers=("requester_mac", "requester_ip", "requester_vlan", "responder_mac",
                                      "responder_ip", "responder_qpn", "responder_rkey"))
        # (a CREDIT's requester, at each of the connections the next clock's frame may be to: the same worker's,
        # the next worker's and the next descriptor's, each read at registers, the choice after the reads)
        credit_tables = {}
        for source in CreditSource:
            m.submodules[f"credit_connections_{source.name.lower()}"] = credit_tables[source] = ConnectionTable(
                connections=C, registers=("requester_mac", "requester_ip"), sums=("requester_ip",))
        m.d.comb += [result_connections.write.eq(self.connection_write),
                     *[table.write.eq(self.connection_write) for table in credit_tables.values()]]
        job_id = Array(fields_of(self.jobs, self.jobs_count, "id"))
        sent = Array(self.sent[c] for c in range(C))

        # The payload sequencer issues the payload words of each frame, one a clock, into the ``outgoing``
        # FIFO in front of ``payload``, while it holds a credit for an entry of that FIFO (counted in a
        # register): nothing it decides waits on the deparser taking a word. Each frame's words come from
        # one source: the packet ring (a FORWARD frame's words, as many as its descriptor says), the result
        # memory (a slot's sum or a duplicate's stored sum, with a first packet's own 16 bytes over its
        # start: a duplicate's from its descriptor, a result's from the header store) or the CREDIT control
        # frame built from the descriptor. A word issued in one clock comes out of its source in the next
        # (``issued``) and is written a clock after that (``fetched``).
        m.submodules.header_jobs = header_jobs = SyncFIFOBuffered(width=Descriptor.size, depth=4)
        depth = self.OUTGOING_DEPTH
        m.submodules.outgoing = outgoing = SyncFIFOBuffered(width=PayloadBeat(W).size, depth=depth)
        out = self.payload
        m.d.comb += [out.valid.eq(outgoing.r_rdy), out.payload.eq(outgoing.r_data), outgoing.r_en.eq(out.ready)]
        credits = Signal(range(depth + 1), init=depth)

        # The descriptor's fields that hold one value in this build: an index into the one job, message slot or
        # worker, and the bounded-loss fields of a build without the class. They come through the monitor's
        # queue in RAM, where synthesis cannot see that they never change; taken as 0 here, the choices they
        # make (the connection a result's header is addressed with, the template's entry) fold away.
        fixed = {name for name, count in (("job", self.jobs_count), ("k", K), ("worker", N), ("template", N))
                 if count == 1}
        if not self.bounded_loss:
            fixed |= {"lossy", "resend", "bitmap", "template"}

        def settled(descriptor, name):
            value = Signal(Descriptor, name=name)
            m.d.comb += value.eq(descriptor)
            m.d.comb += [value[field].eq(0) for field in sorted(fixed)]
            return value

        descriptors = self.descriptors
        job = settled(descriptors.payload, "taken")
        d = Signal(Descriptor)                  # the descriptor whose frames are being issued
        worker = Signal(range(N + 1))           # ... for this worker
        loaded, awaiting_sum = Signal(), Signal()
        beat_no, last_no = Signal(range(self.max_frame // B + 2)), Signal(range(self.max_frame // B + 2))
        more = Signal()                         # another frame of the descriptor follows (next worker)
        go = Signal()
        m.d.comb += go.eq(loaded & (credits != 0))
        is_last = beat_no == last_no
        m.d.sync += credits.eq(credits - go + (out.valid & out.ready))

        # finished sums, taken from the slot memory as they come (sums finish in the order of the RESULTS
        # descriptors), so that sums run ahead of the emission by as many packet slots as there are
        sums_ready = Signal(range(self.slots + 2))
        sum_used = Signal()
        m.d.comb += self.sum_done.ready.eq(1)
        m.d.sync += sums_ready.eq(counted(m, sums_ready, self.sum_done.valid, sum_used))
        # the RESULTS descriptors (not resends) whose contributions' headers are in the header store
        # (``stored``, one a descriptor, in their order: ``records.HeaderRecords``); each is taken only then, so
        # that the header sequencer reads the store after its writes
        stores_ready = Signal(range(self.slots + 2))
        store_used = Signal()
        m.d.sync += stores_ready.eq(counted(m, stores_ready, self.stored, store_used))

        control_beats = -(-ETH_MIN_FRAME // B)
        # (where the next clock's job and worker come from, ``d.job`` and ``worker`` then: a CREDIT's requester
        # is read from its tables a clock ahead, below)
        credit_source = Signal(CreditSource)
        m.d.comb += credit_source.eq(CreditSource.SAME)
        with m.If(go):
            m.d.sync += beat_no.eq(Mux(is_last, 0, beat_no + 1))
            with m.If(is_last & more):
                m.d.comb += credit_source.eq(CreditSource.NEXT_WORKER)
                m.d.sync += [worker.eq(worker + 1), more.eq(worker + 2 < d.workers)]
        first_worker = Mux(job.all, 0, job.worker)      # a descriptor's first frame's (``all``: one per worker)
        take = (~loaded & ~awaiting_sum) | (go & is_last & ~more)
        needs_sum = (job.kind == RESULTS) & ~job.resend
        takeable = header_jobs.w_rdy & (~needs_sum | (stores_ready != 0))
        with m.If(take):
            m.d.sync += loaded.eq(0)
            m.d.comb += [descriptors.ready.eq(takeable), header_jobs.w_en.eq(descriptors.valid & takeable)]
            with m.If(descriptors.valid & takeable):
                several = job.all                   # one frame per worker, from worker 0
                m.d.comb += store_used.eq(needs_sum)
                sum_now = needs_sum & (sums_ready != 0)
                m.d.comb += credit_source.eq(CreditSource.NEXT_DESCRIPTOR)
                m.d.sync += [d.eq(job), worker.eq(first_worker),
                             more.eq(several & (job.workers > 1)),
                             # (a payload of no bytes still takes one word, with no byte kept)
                             last_no.eq(Mux(job.kind == CREDITS, control_beats - 1,
                                            Mux(job.beats == 0, 0, job.beats - 1))),
                             loaded.eq(~needs_sum | sum_now),
                             awaiting_sum.eq(needs_sum & ~sum_now)]
                m.d.comb += sum_used.eq(sum_now)
        with m.If(awaiting_sum & (sums_ready != 0)):
            m.d.sync += [loaded.eq(1), awaiting_sum.eq(0)]
            m.d.comb += sum_used.eq(1)
        with m.If(go & is_last & ~more):
            m.d.comb += [self.results_sent.valid.eq(d.kind == RESULTS), self.results_sent.message.eq(d.job * K + d.k)]

        # the sources' reads, issued with the word
        read, ring_r, own_r = self.results, self.ring, self.store_own
        from_ring, from_results = d.kind == FORWARD, (d.kind == RESULTS) | (d.kind == DUPLICATE)
        m.d.comb += [
            ring_r.en.eq(go & from_ring), ring_r.addr.eq(self.ring_read[:self.ring_bits]),
            read.en.eq(go & from_results), read.result_slot.eq(d.rslot), read.beat.eq(beat_no),
            own_r.en.eq(go & (d.kind == RESULTS) & (beat_no == 0)),
            own_r.addr.eq(d.slot * N + Mux(d.lossy, d.template, worker)),   # a bounded-loss result: the template's
        ]
        with m.If(go & from_ring):
            m.d.sync += self.ring_read.eq(self.ring_read + 1)

        # a CREDIT control frame, 60 bytes, to the requester of the worker's connection, read from its tables in
        # the clock before (at the connection of each job and worker the next clock may have, from registers,
        # the one it has chosen after the reads), so that the frame's paths start at a register: a write to
        # that requester's address reaches the frames a clock after the table
        sw = self.switch
        tables = credit_tables
        m.d.comb += [tables[CreditSource.SAME].conn.eq(d.job * N + worker),
                     tables[CreditSource.NEXT_WORKER].conn.eq(d.job * N + worker + 1),
                     tables[CreditSource.NEXT_DESCRIPTOR].conn.eq(job.job * N + first_worker)]
        requester = Signal(tables[CreditSource.SAME].Entry, reset_less=True)
        with m.Switch(credit_source):
            for source, table in tables.items():
                with m.Case(source):
                    m.d.sync += requester.eq(table.entry)
        dst_ip = requester.requester_ip
        dst_ip_sums = {source: table.entry.requester_ip_sum for source, table in tables.items()}
        checksum = control_checksum(m, sw.ip, dst_ip_sums, credit_source)
        built = control_frame(B, dst_mac=requester.requester_mac, dst_ip=dst_ip, src_mac=sw.mac,
                              src_ip=sw.ip, checksum=checksum, port=sw.control_port,
                              job=job_id[d.job], worker=worker, value=d.value)
        frame = Signal(len(built), name="control_frame")     # built once: each of its words reads it
        m.d.comb += frame.eq(built)
        control_words = Array(frame[i * W:(i + 1) * W] for i in range(control_beats))

        # the word issued a clock ago, with what the descriptor said of it
        Issued = data.StructLayout({"valid": 1, "kind": Emission, "first": 1, "last": 1, "keep": B, "overlay": 1,
                                    "beat": range(max(1, OWN_BYTES // B) + 1), "own": 8 * OWN_BYTES, "control": W})
        issued = Signal(Issued)
        last_control_keep = (1 << (ETH_MIN_FRAME - (control_beats - 1) * B)) - 1
        m.d.sync += [
            issued.valid.eq(go), issued.kind.eq(d.kind), issued.first.eq(beat_no == 0), issued.last.eq(is_last),
            issued.keep.eq(Mux(d.kind == CREDITS, Mux(is_last, last_control_keep, (1 << B) - 1),
                               lanes_below(d.length, beat_no, B))),
            issued.overlay.eq(d.index0 & (beat_no < max(1, OWN_BYTES // B))), issued.beat.eq(beat_no),
            issued.control.eq(control_words[beat_no]),
        ]
        with m.If(go & (beat_no == 0)):
            m.d.sync += issued.own.eq(d.own)
        # ... and a clock later, with the words its sources read out: each memory's output goes straight into a
        # register (``fetched``), and the word is put together from registers
        fetched = Signal(Issued)
        result_word = Signal(W)
        ring_word = Signal.like(ring_r.data)
        own_word = Signal.like(own_r.data)
        m.d.sync += [fetched.eq(issued), result_word.eq(read.data), ring_word.eq(ring_r.data), own_word.eq(own_r.data)]
        word = Signal(PayloadBeat(W))
        result_data = Signal(W)
        own_bytes = Mux(fetched.kind == DUPLICATE, fetched.own, own_word)
        m.d.comb += result_data.eq(result_word)
        with m.If(fetched.overlay):
            for lane in range(min(B, OWN_BYTES)):
                for own_beat in range(max(1, OWN_BYTES // B)):
                    if own_beat * B + lane < OWN_BYTES:
                        with m.If(fetched.beat == own_beat):
                            m.d.comb += result_data[8 * lane:8 * lane + 8].eq(own_bytes[8 * (own_beat * B + lane):][:8])
        m.d.comb += [word.first.eq(fetched.first), word.last.eq(fetched.last), word.keep.eq(fetched.keep),
                     word.verdict.eq(GOOD_VERDICT)]
        with m.Switch(fetched.kind):
            with m.Case(FORWARD):
                m.d.comb += [word.data.eq(ring_word.data), word.keep.eq(ring_word.keep),
                             word.verdict.eq(ring_word.verdict)]
            with m.Case(RESULTS, DUPLICATE):
                m.d.comb += word.data.eq(result_data)
            with m.Case(CREDITS):
                m.d.comb += word.data.eq(fetched.control)
        m.d.comb += [outgoing.w_en.eq(fetched.valid), outgoing.w_data.eq(word)]

        # The header sequencer. A record and its class are handed over in the same clock (``hdr`` and
        # ``classes`` both ready; neither's ``ready`` depends on its ``valid``).
        h_control = Signal()
        h_valid, h_ready = Signal(), Signal()
        record = Signal(ParsedHeader)
        destination = Signal(48)        # the frame's destination MAC: its record's, a CREDIT's requester's
        lossy_result = Signal()
        record_dscp = Mux((record.ip_version == 4) | (record.ip_version == 6), record.ip_dscp, 0)
        m.d.comb += [
            self.hdr.valid.eq(h_valid & self.classes.ready), self.hdr.payload.eq(record),
            self.classes.valid.eq(h_valid & self.hdr.ready),
            self.classes.payload.frame_class.dscp.eq(Mux(h_control, CONTROL_DSCP, record_dscp)),
            self.classes.payload.frame_class.lossy.eq(lossy_result),
            destination.eq(record.eth_dst), self.classes.payload.eth_dst.eq(destination),
            h_ready.eq(self.hdr.ready & self.classes.ready),
            self.frame_out.eq(h_valid & h_ready),
        ]
        headers, hs_r = self.headers, self.store_header
        incoming = settled(header_jobs.r_data, "incoming")
        h_desc = Signal(Descriptor)
        h_worker = Signal(range(N + 1))
        restoring = Signal(result_connections.Entry, reset_less=True)     # the connection of the header restored ...
        restoring_psn = Signal(24)               # ... and its next PSN toward the responder (a bounded-loss result)
        restoring_epoch = Signal()               # ... of the connection's sequence then (``psn_used_layout``)
        store_read = Signal()
        m.d.comb += [hs_r.en.eq(store_read),
                     hs_r.addr.eq(h_desc.slot * N + Mux(h_desc.lossy, h_desc.template, h_worker)),
                     header_jobs.w_data.eq(job)]
        h_more = h_worker + 1 < h_desc.workers
        c = h_desc.job * N + h_worker           # the connection of a result's or a CREDIT's header
        m.d.comb += result_connections.conn.eq(c)
        with m.FSM(name="headers"):
            def take():
                """Take the next descriptor (in TAKE, or in the clock the last header of one is handed over,
                so that a 1-beat frame's header goes every clock)."""
                m.d.comb += header_jobs.r_en.eq(1)
                m.next = "TAKE"
                with m.If(header_jobs.r_rdy):
                    m.d.sync += [h_desc.eq(incoming), h_worker.eq(Mux(incoming.all, 0, incoming.worker))]
                    with m.Switch(incoming.kind):
                        with m.Case(FORWARD, DUPLICATE):
                            m.next = "FIFO_HEADER"
                        with m.Case(RESULTS):
                            m.next = "STORE_READ"
                        with m.Case(CREDITS):
                            m.next = "CONTROL_HEADER"

            with m.State("TAKE"):
                take()
            with m.State("FIFO_HEADER"):
                m.d.comb += [h_valid.eq(headers.valid), record.eq(headers.payload), headers.ready.eq(h_ready)]
                with m.If(h_valid & h_ready):
                    take()
            with m.State("STORE_READ"):
                # (the worker's connection is registered with the read, on the way into the record; its ``sent``
                # changes only with a header this sequencer hands over, or with a restart of the connection, which
                # its epoch, read with it, tells at the hand-over)
                m.d.comb += store_read.eq(1)
                m.d.sync += [restoring.eq(result_connections.entry), restoring_psn.eq(sent[c] + 1),
                             restoring_epoch.eq(self.sent_epochs.bit_select(c, 1))]
                m.next = "STORE_HEADER"
            with m.State("STORE_HEADER"):
                # the worker's stored header, addressed from its requester to its responder (the connection
                # fixes those: ``StoredHeader``)
                m.d.comb += h_valid.eq(1)
                restore_header(m, record, data.View(StoredHeader, hs_r.data), requester_mac=restoring.requester_mac,
                               requester_ip=restoring.requester_ip, requester_vlan=restoring.requester_vlan,
                               responder_mac=restoring.responder_mac, responder_ip=restoring.responder_ip,
                               responder_qpn=restoring.responder_qpn)
                with m.If(h_desc.lossy):
                    # a bounded-loss result: the template's, to this worker's connection, with no VLAN priority,
                    # the connection's next PSN, the responder's R_Key and the bitmap
                    m.d.comb += [lossy_result.eq(1), record.vlan_tci.eq(restoring.requester_vlan[:_VID_BITS]),
                                 record.bth_psn.eq(restoring_psn),
                                 record.reth_rkey.eq(restoring.responder_rkey), record.immdt.eq(h_desc.bitmap)]
                    with m.If(h_ready):
                        m.d.comb += [self.psn_used.valid.eq(restoring_epoch == self.sent_epochs.bit_select(c, 1)),
                                     self.psn_used.conn.eq(c)]
                with m.If(h_ready):
                    m.d.sync += h_worker.eq(h_worker + 1)
                    with m.If(h_desc.all & h_more):
                        m.next = "STORE_READ"
                    with m.Else():
                        take()
            with m.State("CONTROL_HEADER"):
                m.d.comb += [h_valid.eq(1), record.eq(0), h_control.eq(1),
                             destination.eq(result_connections.entry.requester_mac)]
                with m.If(h_ready):
                    m.d.sync += h_worker.eq(h_worker + 1)
                    with m.If(~(h_desc.all & h_more)):
                        take()
        return m


# --- the CREDIT control frame --------------------------------------------------------------------------------

def counted(m, count, added, taken):
    """``count`` plus ``added`` less ``taken`` (a bit each): both sums made from the count and ``added``, and
    ``taken``, decided late in the clock (by the take), choosing between them."""
    more = Signal.like(count, name=f"{count.name}_more")
    m.d.comb += more.eq(count + added)
    return Mux(taken, more - 1, more)


class CreditSource(enum.Enum, shape=2):
    """Where the job and worker of the emitter's next clock come from: the clock's own (``SAME``), the next
    worker's frame of the descriptor (``NEXT_WORKER``), the next descriptor's first frame (``NEXT_DESCRIPTOR``)."""
    SAME = 0
    NEXT_WORKER = 1
    NEXT_DESCRIPTOR = 2


_IPV4_VERSION_TOS = 0x4500 | CONTROL_DSCP << 2
_IPV4_FIXED = _IPV4_VERSION_TOS + 40 + 0x4000 + ((64 << 8) | 17)   # a control frame's constant IPv4 words


def control_checksum(m, src_ip, dst_ip_sums_next, source_next):
    """The IPv4 header checksum of a control frame, from ones' complement sums in registers, so that the clock
    that builds the frame chooses one and adds its last carry back (one 16-bit increment): the constant words
    with the source, the switch's address (configuration, folded to 16 bits in two registers: traffic follows
    configuration by far more), added to each candidate destination's words folded (``dst_ip_sums_next``, by
    ``CreditSource``: the connection tables' ``requester_ip_sum``, read a clock before the frame) and
    registered, and the candidate ``source_next`` names registered beside them. Every sum is of a header whose
    words are not all zero, so the folds give the checksum's own value and never 0xFFFF for 0."""
    fixed, base = Signal(18), Signal(16)
    m.d.sync += [fixed.eq(_IPV4_FIXED + src_ip[16:] + src_ip[:16]),
                 base.eq(ones_complement_fold(ones_complement_fold(fixed)))]
    totals = {}
    for source, dst_ip_sum in dst_ip_sums_next.items():
        totals[source] = Signal(17, name=f"checksum_sum_{source.name.lower()}")
        m.d.sync += totals[source].eq(base + dst_ip_sum)
    source = Signal.like(source_next)
    m.d.sync += source.eq(source_next)
    total = Signal(17)
    with m.Switch(source):
        for name, value in totals.items():
            with m.Case(name):
                m.d.comb += total.eq(value)
    return ~ones_complement_fold(total)[:16]


def control_frame(beat_bytes, *, dst_mac, dst_ip, src_mac, src_ip, checksum, port, job, worker, value):
    """A CREDIT control frame (``netreduce.host.protocol.build_control_frame``), zero-padded to whole beats
    of ``beat_bytes``: byte ``i`` in bits ``8i..8i+7``."""
    def big_endian(v, n):
        v = Value.cast(v)
        v = Cat(v, Const(0, 8 * n - len(v))) if len(v) < 8 * n else v
        return [v[8 * (n - 1 - i):8 * (n - i)] for i in range(n)]

    def constant(v, n):
        return [Const((v >> 8 * (n - 1 - i)) & 0xFF, 8) for i in range(n)]

    octets = (big_endian(dst_mac, 6) + big_endian(src_mac, 6) + constant(ETHERTYPE_IPV4, 2)
              + constant(_IPV4_VERSION_TOS, 2) + constant(40, 2) + constant(0, 2) + constant(0x4000, 2)
              + constant((64 << 8) | 17, 2) + big_endian(checksum, 2) + big_endian(src_ip, 4)
              + big_endian(dst_ip, 4) + big_endian(port, 2) + big_endian(port, 2) + constant(20, 2)
              + constant(0, 2) + constant(CONTROL_MAGIC, 2) + constant(CONTROL_VERSION, 1)
              + constant(int(ControlType.CREDIT), 1) + big_endian(job, 2) + big_endian(worker, 1)
              + constant(0, 1) + big_endian(value, 4))
    beats = -(-ETH_MIN_FRAME // beat_bytes)
    octets += [Const(0, 8)] * (beats * beat_bytes - len(octets))
    return Cat(*octets)
