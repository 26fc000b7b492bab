"""The status monitor (``StatusMonitor``): each frame's fate, from its header, its connection's state and its payload.

The behaviour is the contract of docs/ARCHITECTURE.md ("Aggregation (the NetReduce switch)", "Switch
behaviour, per received frame"), from which the golden model ``netreduce.sim.switch_model`` is written too
(``SwitchModel.receive``: one frame's checks, outcome and counter). The monitor owns all the switch's
per-connection, per-message and per-packet-slot state, one frame at a time:

- ``frames``: the fields of each frame's header record that it decides on (``match.MonitoredHeader``) with
  its connection match (``match.ConnectionMatch``, from configuration only, the binding included), queued
  ahead of the monitor as headers arrive (the whole record waits in ``records.HeaderRecords``);
- ``payload``: the parser's payload stream with its verdicts, one beat a clock.

``IDLE`` takes a header (first applying a job's or connection's restart, its enable written, which waits there
for the frame the monitor holds); ``LOOKUP`` plans the frame from the header, its match and the connection and
slot state (registered; at 64 bits the job's oldest message's row is read as the header loads, in ``TAKE``, the
connection's state into a registered view in ``LOOKUP_READ`` and the packet slot it points to in ``LOOKUP_SLOT``,
each a clock before the next; a frame of no connection skips them, its plan being its match, and at 512 bits an ACK
skips ``LOOKUP``, planned as its header is taken, ``ack_plan``); ``STREAM`` takes the payload at one beat per clock into
the packet ring (``ring_write``: frames that go on) or into the worker's bank of the slot memory (``slot_write``:
contributions), checks the aggregation header lane by lane as it passes and keeps the first 64 bytes. The frame
commits with its last beat; at 64 bits a frame of a connection commits in ``COMMIT``, the clock after it, from the
last beat's facts and intended outcome registered (``last_facts``, ``last_outcome``). What the commit would do
(``intended``) and where the monitor goes next come from the plan alone; the last beat's facts (verdicts, size, the
byte counts as registered marks, the aggregation header) only say whether it happens, so they reach nothing but the
write enables of state, bitmap, the store of own bytes (``own_write``), ``descriptors`` and ``sum_requests``, and
the frame's fate. The next header is taken in the commit's clock; at 64 bits it is loaded in ``TAKE``, the clock
after, from the state alone, and behind a frame of no connection that takes it on its last beat, its fields and
arrival load a clock later (``record_pending``), so that no late condition enables the registers a header loads;
counters (``increments``) add two clocks later. Rare cases take clocks of their own: ``DUP_SEARCH``, ``DUP_TEST``,
``DUP_PICK`` and ``DUP_READ`` (a retransmission: the held message that has its PSN, and its packet slot; at 64 bits
it is planned in ``LOOKUP_SLOT``), ``CONTROL_PARSE``, ``CONTROL_CHECK`` and ``CONTROL`` (a control frame: its credit
request), ``MANAGEMENT`` (a management request from the manager, with a ``management`` address: checked and handed
on ``management_request`` to ``management.ManagementAgent``), ``RELEASE_READ``, ``RELEASE_CHECK`` and ``RELEASE``
(after an ACK that makes the oldest message delivered: frees the job's delivered messages, three clocks each, and
queues their credits). The bounded-loss class (docs "Bounded-loss class (RTL)"; its states are built only with the
class, ``bounded_loss``): a contribution streams into the
bank of the message slot its payload's ``msg_seq`` names and is decided after its last beat in ``LOSSY_READ`` and
``LOSSY`` (where its ``msg_seq`` is in its first payload beat, at 512 bits, it is planned as its header is taken,
without ``LOOKUP``, and from its second payload beat on, its message is read as it streams, so that it goes from its
last beat to ``LOSSY``); a RESULT_REQUEST in ``RR_READ`` and ``RR_APPLY``; ``EXPIRE`` finds a message whose deadline
has come (``deadlines.Deadlines``, from each frame's ``arrival``), ``COMPLETE`` completes one (masked sum, results),
and ``ADVANCE`` moves the job's window with its credits (a clock a message, and one for the first not complete).
Writes before the commit are speculative: the packet ring rolls back, and a bank word is written only where the
worker's bit is clear.

Out of the monitor, in commit order: ``descriptors`` to ``emitter.Emitter``, each frame's ``fates`` (where its
header record goes: on, into the header store, nowhere) to ``records.HeaderRecords``, ``sum_requests``
to ``hw.slots.SlotMemory``; ``sent`` (each connection's newest result PSN toward its responder) and its epoch
(``sent_epochs``, flipped at each restart of the connection) to the emitter, which reports back ``results_sent``
(``unsent.UnsentResults``, which holds a message's release until its results have left) and ``psn_used`` (a
bounded-loss result's PSN, strobed only in the epoch it was read in).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ...registers import COUNTERS, HISTOGRAM_COUNTERS
from ...wire import (
    AGG_MAGIC,
    AGG_VERSION,
    BTH,
    DTYPE_CODES,
    ETH_HEADER,
    ICRC_BYTES,
    IPV4_HEADER,
    RESULT_RESENDS,
    UC_WRITE_OPCODES,
    UDP_HEADER,
    header_bytes,
)
from ..parser import keep_count
from ..ram import BlockRAMFIFO
from ..slots import slot_write_signature, sum_request_layout
from ..stream import fifo_to_stream, payload_stream
from .deadlines import Deadlines
from .emitter import (
    OWN_BYTES,
    Emission,
    descriptor_layout,
    frame_words,
    psn_used_layout,
    ring_address_bits,
    stored_beat_layout,
)
from .management import ManagementRequest
from .match import MonitoredHeader, match_layout
from .records import Fate, fate_layout
from .registers import ConnectionEntry, JobEntry, fields_of
from .requests import WINDOW_BYTES, RequestDecoder, big_endian
from .unsent import UnsentResults, message_strobe_layout

__all__ = ["StatusMonitor", "Outcome"]

PSN_BITS = 24
_HALF = 1 << (PSN_BITS - 1)
_FIRST_OPCODES = (0x06, 0x0A, 0x0B)
_LAST_OPCODES = (0x08, 0x09, 0x0A, 0x0B)
_WRITE_OPCODES = (0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B)
_ACKNOWLEDGE = 0x11
_NAK_SEQUENCE = 0x60
_LOSSY_OPCODE = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]     # a bounded-loss job's one data opcode (0x2B)
_MSG_SEQ_BYTE = 11          # the last (least significant) byte of the aggregation header's msg_seq


class Outcome(enum.Enum, shape=4):
    """What the monitor's commit does with a frame (docs/ARCHITECTURE.md, "Switch behaviour, per received
    frame"): dropped; forwarded (a gap's first packet with its PSN shifted back); an ACK forwarded; a
    contribution; a duplicate answered; a control frame's request (CHECK, then CREDIT or RESULT_REQUEST); a
    management request; a bounded-loss contribution (decided in LOSSY)."""
    DROP = 0
    FORWARD = 1
    FORWARD_GAP = 2
    ACK = 3
    CONTRIBUTE = 4
    DUPLICATE = 5
    CREDIT = 6
    CHECK = 7
    MANAGE = 8
    LOSSY = 9
    RESULT_REQUEST = 10


def _not_behind(a, b):
    """PSN ``a`` is at or ahead of ``b`` (``(a - b) mod 2^24 < 2^23``)."""
    return (a - b)[:PSN_BITS] < _HALF


class StatusMonitor(wiring.Component):
    """``StatusMonitor(*, width, workers, jobs, dtype, mtu, message_packets, message_slots, max_frame, ports,
    management=None, increment_bits, bounded_loss=True)``: the switch's parameters (``top.NetReduceSwitch``,
    which checks them); without ``bounded_loss`` no job is of the bounded-loss class.

    Ports (the module's docstring): ``frames`` (``header``, ``match``) and ``payload`` in, ``arrival`` (a frame's
    first beat went into the pipeline); the configuration ``jobs``, ``connections`` (their ``valid`` and
    ``start_psn`` only: a control request's sender is checked with the match's ``from_requester`` and
    ``from_responder``), ``job_enabled`` and ``connection_enabled`` (``registers.SwitchRegisters``) in,
    ``increments`` (its counters, every one but ``frames_out``) out; ``descriptors``, ``fates``,
    ``sum_requests`` out; ``slot_write``, ``ring_write`` (with ``ring_read``, the emitter's pointer, in) and
    ``own_write`` (a contribution's first 16 payload bytes, into the header store's second memory) out;
    ``sent`` out, ``psn_used`` and ``results_sent`` in; ``management_request`` out with a ``management``
    address.
    """

    def __init__(self, *, width, workers, jobs, dtype, mtu, message_packets, message_slots, max_frame, ports,
                 increment_bits, management=None, bounded_loss=True):
        self.width, self.workers, self.jobs_count, self.dtype = width, workers, jobs, dtype
        # the bounded-loss class is built (a bounded-loss job needs two message slots at least: its window is
        # half of them)
        self.bounded_loss = bounded_loss and message_slots >= 2
        self.mtu, self.message_packets, self.message_slots = mtu, message_packets, message_slots
        self.max_frame, self.ports, self.management = max_frame, ports, management
        self.beat_bytes = width // 8
        self.packet_beats = -(-mtu // self.beat_bytes)
        self.connections_count = C = jobs * workers
        self.slots = S = jobs * message_slots * message_packets
        # Where the own bytes of the shortest RoCE frame (Ethernet, IPv4, UDP, BTH, ICRC: 58) span two beats or
        # more, a frame of a connection leaves the monitor clocks to spare (docs: "Aggregation", the monitor):
        # LOOKUP takes three clocks, and such a frame commits in a clock after its last beat (``registered_commit``)
        own_bytes = sum(header_bytes(t) for t in (ETH_HEADER, IPV4_HEADER, UDP_HEADER, BTH)) + ICRC_BYTES
        spare = own_bytes >= 2 * self.beat_bytes
        self.lookup_clocks = 3 if spare else 1
        self.registered_commit = spare
        # there too, the next header is loaded in a clock of its own (TAKE), after the clock that decides it
        self.registered_take = spare
        self.frame_beats = frame_words(width, max_frame)
        self.ring_bits = ring_address_bits(self.frame_beats)
        self.Descriptor = descriptor_layout(workers=workers, jobs=jobs, message_slots=message_slots, slots=S,
                                            frame_beats=self.frame_beats)
        self.Match = match_layout(C, ports)
        self.Matched = data.StructLayout({"header": MonitoredHeader, "match": self.Match})
        super().__init__({
            "frames": In(stream.Signature(self.Matched)),
            "payload": In(payload_stream(width)),
            "arrival": In(1),
            "jobs": In(data.ArrayLayout(JobEntry, jobs)),
            "connections": In(data.ArrayLayout(ConnectionEntry, C)),
            "job_enabled": In(jobs),
            "connection_enabled": In(C),
            "increments": Out(data.StructLayout(dict.fromkeys(COUNTERS, increment_bits))),
            "descriptors": Out(stream.Signature(self.Descriptor)),
            "fates": Out(stream.Signature(fate_layout(S * workers))),
            "sum_requests": Out(stream.Signature(sum_request_layout(workers, S, self.packet_beats))),
            "slot_write": Out(slot_write_signature(width, workers, S, self.packet_beats)),
            "ring_write": In(WritePort.Signature(addr_width=self.ring_bits, shape=stored_beat_layout(width))),
            "ring_read": In(self.ring_bits + 1),
            "own_write": In(WritePort.Signature(addr_width=ceil_log2(S * workers), shape=8 * OWN_BYTES)),
            "sent": Out(data.ArrayLayout(24, C)),
            "sent_epochs": Out(C),
            "psn_used": In(psn_used_layout(C)),
            "results_sent": In(message_strobe_layout(jobs * message_slots)),
            **({"management_request": Out(stream.Signature(ManagementRequest(ports)))}
               if management is not None else {}),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.beat_bytes
        N, J, K, M = self.workers, self.jobs_count, self.message_slots, self.message_packets
        C, S, Pb = self.connections_count, self.slots, self.packet_beats
        k_bits = max(1, exact_log2(K))
        m_bits = max(1, ceil_log2(M))
        slot_bits = max(1, ceil_log2(S))
        beat_bits = max(1, ceil_log2(Pb))
        worker_bits = max(1, ceil_log2(N))
        job_bits = max(1, ceil_log2(J))
        conn_bits = max(1, ceil_log2(C))
        m.submodules.deadlines = deadlines = Deadlines(jobs=J, message_slots=K)
        m.d.comb += deadlines.arrival.eq(self.arrival)
        Match = self.Match

        def registers(count, shape, name):
            return Array(Signal(shape, name=f"{name}_{i}") for i in range(count))

        def write_at(elements, index, value, domain="sync"):
            """``elements[index].eq(value)`` at a run-time ``index``, as one ``If`` per element: Amaranth
            lowers an ``Array`` written at a run-time index to a switch over every index in the process of
            each element, a text quadratic in the array's length (most of the switch's Verilog, and of the
            C++ that Verilator makes of it). A computed ``value`` is a signal of its own, so that it is built
            once, not once per element."""
            if isinstance(value, Value):
                shared = Signal(value.shape(), name="written")
                m.d.comb += shared.eq(value)
                value = shared
            for i, element in enumerate(elements):
                with m.If(index == i):
                    m.d[domain] += element.eq(value)

        def field(records, count, *path):
            return Array(fields_of(records, count, *path))

        job_valid, job_id = field(self.jobs, J, "valid"), field(self.jobs, J, "id")
        job_n, job_mtu = field(self.jobs, J, "workers"), field(self.jobs, J, "mtu")
        job_start_msg = field(self.jobs, J, "start_msg")
        job_lossy, job_deadline = field(self.jobs, J, "lossy"), field(self.jobs, J, "deadline")
        bounded_loss = self.bounded_loss        # (without it, the class's states and their logic are not built)
        if not bounded_loss:
            job_lossy = Array(Const(0, 1) for _ in range(J))
        W_lossy = max(1, K // 2)        # a bounded-loss job's window (its other half keeps results for requests)
        job_oldest = registers(J, 32, "job_oldest")
        # what ``job_oldest`` holds from the next clock (its writes go here), so that memories are read at it a
        # clock ahead
        oldest_next = [Signal(32, name=f"job_oldest_next_{j}") for j in range(J)]
        m.d.comb += [oldest_next[j].eq(job_oldest[j]) for j in range(J)]
        m.d.sync += [job_oldest[j].eq(oldest_next[j]) for j in range(J)]
        conn_valid, start_psn = field(self.connections, C, "valid"), field(self.connections, C, "start_psn")
        expected, delivered = registers(C, 24, "expected"), registers(C, 24, "delivered")
        sent = registers(C, 24, "sent")         # the PSN of the newest result sent toward the responder
        sent_epoch = Signal(C)                  # ... of which sequence: each restart of the connection flips it
        next_seq, next_k = registers(C, 32, "next_seq"), registers(C, k_bits, "next_k")
        in_msg, cur_k = registers(C, 1, "in_msg"), registers(C, k_bits, "cur_k")
        cur_first = registers(C, 24, "cur_first")      # the first PSN of the connection's current message
        msg_busy, msg_seq = registers(J * K, 1, "msg_busy"), registers(J * K, 32, "msg_seq")
        # a bounded-loss message (FREE: not busy; OPEN; COMPLETE) and the clock it opened at; its bitmap and
        # length are those of its packet slot 0
        msg_complete, msg_opened = registers(J * K, 1, "msg_complete"), registers(J * K, 32, "msg_opened")
        wk_started, wk_closed = registers(J * K * N, 1, "wk_started"), registers(J * K * N, 1, "wk_closed")
        wk_first = registers(J * K * N, 24, "wk_first")
        wk_count = registers(J * K * N, ceil_log2(M + 1), "wk_count")
        # the PSN of a closed part's last packet, a row of N parts a message, in a memory: it is read only at
        # each job's oldest message (``oldest_last``, a read port a job addressed a clock ahead, so that its data
        # register holds the row of the oldest as registers would, the clock's writes included), and written as
        # a part closes, one a clock; a restart or a release leaves it (``wk_closed`` says which parts count)
        m.submodules.parts_last = parts_last = Memory(shape=data.ArrayLayout(PSN_BITS, N), depth=J * K, init=[])
        last_write = parts_last.write_port(granularity=1)
        oldest_last = []
        for j in range(J):
            last_read = parts_last.read_port(domain="sync", transparent_for=(last_write,))
            m.d.comb += last_read.addr.eq(j * K + oldest_next[j][:k_bits])
            oldest_last.append(last_read.data.as_value())
        pk_bitmap, pk_len = registers(S, N, "pk_bitmap"), registers(S, 16, "pk_len")
        pk_ready, pk_gen = registers(S, 1, "pk_ready"), registers(S, 1, "pk_gen")
        # a bounded-loss message's results sent again to each worker's receiver (RESULT_RESENDS at most)
        resends = registers(J * K * N, RESULT_RESENDS.bit_length(), "resends")
        # RESULTS descriptors of each message not yet sent in full (``unsent.UnsentResults``): a message is not
        # released before its results have left, even if an ACK (which no real NIC sends this early) says otherwise
        m.submodules.unsent = unsent = UnsentResults(J * K)
        msg_all_sent = Array(unsent.all_sent[i] for i in range(J * K))
        unsent_add = Signal()
        unsent_add_at = Signal(range(J * K))
        m.d.comb += [unsent.queued.valid.eq(unsent_add), unsent.queued.message.eq(unsent_add_at)]
        # each counter grows by what its event's clock sets (SwitchRegisters adds it a clock later)
        def count(name, amount=1):
            m.d.comb += self.increments[name].eq(amount)

        def workers_mask(j):
            return Cat(*[Const(w) < job_n[j] for w in range(N)])

        # A written enable restarts its job or connection between frames: it waits (``restart_jobs``,
        # ``restart_connections``) until the monitor holds no frame, takes no header meanwhile, and applies in
        # IDLE (``restarting``), so that no frame is decided on state from both sides of it.
        restart_jobs, restart_connections = Signal(J), Signal(C)
        restarting = Signal()
        restart_pending = restart_jobs.any() | restart_connections.any()
        m.d.sync += [restart_jobs.eq(Mux(restarting, 0, restart_jobs) | self.job_enabled),
                     restart_connections.eq(Mux(restarting, 0, restart_connections) | self.connection_enabled)]
        for c in range(C):
            with m.If(restarting & restart_connections[c]):
                first_message = job_start_msg[c // N]
                m.d.sync += [expected[c].eq(start_psn[c]), delivered[c].eq(start_psn[c] - 1),
                             sent[c].eq(start_psn[c] - 1), sent_epoch[c].eq(~sent_epoch[c]),
                             next_seq[c].eq(first_message),
                             next_k[c].eq(first_message[:k_bits]), in_msg[c].eq(0), cur_k[c].eq(0)]
        for j in range(J):
            with m.If(restarting & restart_jobs[j]):
                m.d.comb += oldest_next[j].eq(job_start_msg[j])
                for k in range(K):
                    m.d.sync += msg_busy[j * K + k].eq(0)
                    for w in range(N):
                        m.d.sync += [wk_started[(j * K + k) * N + w].eq(0), wk_closed[(j * K + k) * N + w].eq(0)]
                    for i in range(M):
                        m.d.sync += [pk_bitmap[(j * K + k) * M + i].eq(0), pk_ready[(j * K + k) * M + i].eq(0)]

        # --- the queues to the emitter and the sum engine ---------------------------------------------------------
        # descriptors (``emitter.Descriptor``, in commit order; ``beats``: the payload's words, a FORWARD frame's
        # in the packet ring, up to ``max_frame``) and each frame's fate (``records.HeaderRecords``: where its
        # header record goes), one a commit, in the same order
        Descriptor, frame_beats, ring_bits = self.Descriptor, self.frame_beats, self.ring_bits
        FORWARD, DUPLICATE, RESULTS, CREDITS = Emission
        m.submodules.descriptors = descriptors = BlockRAMFIFO(width=Descriptor.size, depth=64)
        m.submodules.fates = fates = SyncFIFOBuffered(width=self.fates.payload.shape().size, depth=64)
        fifo_to_stream(m, descriptors, self.descriptors)
        fifo_to_stream(m, fates, self.fates)
        request_layout = self.sum_requests.payload.shape()
        m.submodules.sum_requests = sum_requests = SyncFIFOBuffered(width=request_layout.size, depth=5)
        fifo_to_stream(m, sum_requests, self.sum_requests)
        new_descriptor = Signal(Descriptor)
        new_request = Signal(request_layout)
        m.d.comb += [descriptors.w_data.eq(new_descriptor), sum_requests.w_data.eq(new_request)]

        # packet ring: committed and speculative write pointers (the emitter's read pointer: ``ring_read``)
        ring_depth = 1 << ring_bits
        ring_w = self.ring_write
        ring_committed = Signal(ring_bits + 1)
        ring_cursor = Signal(ring_bits + 1)
        # a word free in the ring, registered: two free a clock ago leave one now (the cursor moves on by one a
        # clock at most; a roll back and the emitter's reads only free words)
        ring_free = Signal()
        m.d.sync += ring_free.eq((ring_cursor - self.ring_read)[:ring_bits + 1] < ring_depth - 1)
        own_w = self.own_write
        m.d.comb += [self.sent[c].eq(sent[c]) for c in range(C)]
        m.d.comb += self.sent_epochs.eq(sent_epoch)
        m.d.comb += unsent.sent.eq(self.results_sent)


        # --- monitor: the plan of the latched header (registered in LOOKUP) -----------------------------------
        # (the header's fields are data, used only in the states after its take: no reset)
        h, hm = Signal(MonitoredHeader, name="h", reset_less=True), Signal(Match, name="h_match")
        Plan = data.StructLayout({
            "control": 1, "plain": 1, "ack": 1, "data": 1, "spoofed": 1, "stray": 1, "management": 1, "refused": 1,
            "lossy": 1,         # a data frame of a bounded-loss job
            "conn": conn_bits, "job": job_bits, "worker": worker_bits,
            "write_op": 1, "gap": 1, "in_seq": 1, "behind": 1, "seq_ok": 1, "first": 1, "last": 1,
            "k": k_bits, "index": 24, "slot": slot_bits, "credit_ok": 1, "length_ok": 1,
            "slot_fits": 1, "bitmap": N, "full": 1, "rslot": slot_bits + 1,
            "job_id": 16, "seq": 32,
            "through": PSN_BITS, "advance": 1, "ahead": 1, "releases": 1, "oldest_message": range(J * K),
            "dup_found": 1, "dup_slot": slot_bits, "dup_index0": 1, "dup_ready": 1, "dup_rslot": slot_bits + 1,
            "dup_same_length": 1,
            "stateless": 1,     # a frame of no connection: forwarded, dropped or a request (no state to write)
            "forward_gap": 1,   # the frame goes on, if at all, as a gap's first packet (its PSN shifted back)
        })
        look = Signal(Plan)
        plan = Signal(Plan)
        roce4 = h.roce & (h.ip_version == 4)
        conn = hm.conn
        conn_job = Signal(job_bits)
        conn_worker = Signal(worker_bits)
        m.d.comb += [conn_job.eq(conn // N), conn_worker.eq(conn % N)]
        opcode, psn = h.bth_opcode, h.bth_psn
        first = Cat(*[opcode == op for op in _FIRST_OPCODES]).any()
        length = h.payload_len

        OldestRow = data.StructLayout({"message": range(J * K), "held": 1, "outside": N, "closed": N,
                                       "last": PSN_BITS * N, "delivered": PSN_BITS * N})

        def oldest_message_row(job, name="oldest_row"):
            """What decides whether the job's oldest message is delivered (``OldestRow``): its index, whether
            the window holds it, and for each worker: outside the job, its part closed (a bit each), the part's
            last PSN and what its connection has delivered through (24 bits each, from ``delivered``)."""
            row = Signal(OldestRow, name=name)
            oldest = job_oldest[job]
            message = job * K + oldest[:k_bits]
            # the message's parts, read as one row per message (one read, not one per worker)
            m.d.comb += [
                row.message.eq(message),
                row.held.eq(msg_busy[message] & (msg_seq[message] == oldest)),
                row.outside.eq(Cat(*[Const(w) >= job_n[job] for w in range(N)])),
                row.closed.eq(Array(Cat(*[wk_closed[i * N + w] for w in range(N)]) for i in range(J * K))[message]),
                row.last.eq(Array(oldest_last)[job] if J > 1 else oldest_last[0]),
                row.delivered.eq(Cat(*[delivered[job * N + w] for w in range(N)])),
            ]
            return row

        def psns(value):
            return [value[w * PSN_BITS:(w + 1) * PSN_BITS] for w in range(N)]

        def delivered_through_last(row):
            """For each worker (a bit each): its connection delivered through its part's last PSN."""
            return Cat(*[_not_behind(done, last) for done, last in zip(psns(row.delivered), psns(row.last),
                                                                        strict=True)])

        # LOOKUP reads the connection's state, then the message's and packet slot's that it points to. Where
        # the shortest RoCE frame's own bytes (headers and ICRC) span two beats or more, the monitor has
        # clocks to spare between payloads: the connection's view is registered in a clock of its own
        # (LOOKUP_READ), and what the view points to, the packet slot and the message a first packet opens, in
        # the next (LOOKUP_SLOT, ``SlotView``); at 512 bits a 17-beat frame has none to spare, and both are read
        # in LOOKUP.
        ConnView = data.StructLayout({
            "distance": PSN_BITS, "in_msg": 1, "msg_index": k_bits, "packet_index": 24, "slot": slot_bits,
            "first_message": range(J * K), "next_seq": 32, "through": PSN_BITS, "advance": 1, "ahead": 1,
            # the job's oldest message, and what each worker's connection has acknowledged of it
            "oldest_message": range(J * K), "oldest_held": 1, "outside": N, "closed": N, "delivered": N,
            "covers": N,        # the ACK's own PSN covers each worker's last PSN (``covering``)
        })
        view_now = Signal(ConnView)
        view = Signal(ConnView)
        read_first = self.lookup_clocks > 1
        # an ACK's PSN delivered through (its own, one less for a NAK) and whether it delivers at all, registered
        # when its header is taken (``ack_at_take``)
        ack_through = Signal(PSN_BITS)
        ack_delivers = Signal()

        def ack_psn(header):
            """An ACK's PSN delivered through and whether it delivers at all."""
            nak = header.aeth_syndrome == _NAK_SEQUENCE
            return Mux(nak, header.bth_psn - 1, header.bth_psn), (header.aeth_syndrome[5:] == 0) | nak

        def ack_at_take(header):
            through_, delivers = ack_psn(header)
            return [ack_through.eq(through_), ack_delivers.eq(delivers)]

        def ack_moves(delivered_psn, sent_psn, through_, delivers):
            """(advance, ahead) of an ACK through ``through_`` on a connection that has delivered through
            ``delivered_psn``: it advances the connection, never past the newest result sent toward the
            responder (``sent_psn``); beyond that it is "ahead", counted and ignored."""
            moves = delivers & ~_not_behind(delivered_psn, through_)
            return moves & _not_behind(sent_psn, through_), moves & ~_not_behind(sent_psn, through_)

        def covering(through_, last):
            """For each worker (a bit each): an ACK through ``through_`` covers its part's ``last`` PSN."""
            return Cat(*[_not_behind(through_, psn_) for psn_ in psns(last)])

        def ack_releases(job, worker, advance_, held, outside, closed, delivered_bits, covers):
            """Whether an ACK (of ``worker`` of ``job``, advancing its connection or not) makes the job's oldest
            message delivered to every worker (its results sent is checked at the commit): the message is
            held, and each worker is outside the job or has closed its part and delivered through its last
            PSN (``delivered_bits``), the ACK's own worker through the ACK's PSN if it advances (``covers``,
            of ``covering``). A bounded-loss job's messages are released by their completion, never by an
            ACK."""
            acked = Cat(*[Mux(advance_ & (worker == w), covers[w], delivered_bits[w]) for w in range(N)])
            return held & (outside | (closed & acked)).all() & ~job_lossy[job]
        view_advance, view_ahead = ack_moves(delivered[conn], sent[conn], ack_through, ack_delivers)
        m.d.comb += [
            view_now.distance.eq(psn - expected[conn]),
            view_now.in_msg.eq(in_msg[conn]),
            view_now.msg_index.eq(Mux(first, next_k[conn], cur_k[conn])),
            view_now.packet_index.eq(Mux(first, 0, psn - cur_first[conn])),
            view_now.first_message.eq(conn_job * K + next_k[conn]),     # the message a first packet opens
            view_now.next_seq.eq(next_seq[conn]),
            # an ACK: the PSN it delivers through, and whether that advances its connection
            view_now.through.eq(ack_through), view_now.advance.eq(view_advance), view_now.ahead.eq(view_ahead),
        ]
        m.d.comb += view_now.slot.eq((conn_job * K + view_now.msg_index) * M + view_now.packet_index[:m_bits])
        # the header's job, at the head of ``frames``
        head_conn, head_job, head_worker = self.frames.payload.match.conn, Signal(job_bits), Signal(worker_bits)
        m.d.comb += [head_job.eq(head_conn // N), head_worker.eq(head_conn % N)]
        if self.registered_take:
            # the job's oldest message's row, read as the header loads (in TAKE: no state is written in that
            # clock or the next), compared in LOOKUP_READ
            oldest_now = Signal(OldestRow, name="oldest_taken")
            oldest_at_take = [oldest_now.eq(oldest_message_row(head_job))]
        else:
            oldest_now = oldest_message_row(conn_job)
        m.d.comb += [view_now.oldest_message.eq(oldest_now.message), view_now.oldest_held.eq(oldest_now.held),
                     view_now.outside.eq(oldest_now.outside), view_now.closed.eq(oldest_now.closed),
                     view_now.delivered.eq(delivered_through_last(oldest_now)),
                     view_now.covers.eq(covering(ack_through, oldest_now.last))]
        if not read_first:
            m.d.comb += view.eq(view_now)
        distance, msg_index, packet_index, in_slot = view.distance, view.msg_index, view.packet_index, view.slot
        first_message, through, advance = view.first_message, view.through, view.advance

        # the packet slot the view points to, and whether a first packet's message may open (a credit: its
        # message slot is free or holds it, and it is within the job's window)
        SlotView = data.StructLayout({"bitmap": N, "length": 16, "gen": 1, "credit_ok": 1})
        slot_view_now = Signal(SlotView)
        slot_view = Signal(SlotView)
        m.d.comb += [
            slot_view_now.bitmap.eq(pk_bitmap[in_slot]), slot_view_now.length.eq(pk_len[in_slot]),
            slot_view_now.gen.eq(pk_gen[in_slot]),
            slot_view_now.credit_ok.eq(~first | (~(msg_busy[first_message] & (msg_seq[first_message] != view.next_seq))
                                                 & ((view.next_seq - job_oldest[conn_job])[:32] < K))),
        ]
        if not read_first:
            m.d.comb += slot_view.eq(slot_view_now)
        look_lossy = hm.data & job_lossy[conn_job]
        look_releases = ack_releases(conn_job, conn_worker, advance, view.oldest_held, view.outside,
                                     view.closed, view.delivered, view.covers)

        def plan_from_header(target, header, match, job, worker, lossy, index_ok, first_op=None):
            """The fields of plan ``target`` that its frame's header and match and the configuration decide
            (``lossy``: a data frame of a bounded-loss job; ``index_ok``: its packet index is below M;
            ``first_op``: its opcode is a first packet's, if already made)."""
            op, payload_len = header.bth_opcode, header.payload_len
            if first_op is None:
                first_op = Cat(*[op == o for o in _FIRST_OPCODES]).any()
            return [
                target.control.eq(match.control),
                target.plain.eq(~(header.roce & (header.ip_version == 4))),
                target.ack.eq(match.ack),
                target.data.eq(match.data),
                target.lossy.eq(lossy),
                target.conn.eq(match.conn), target.job.eq(job), target.worker.eq(worker),
                target.write_op.eq(Mux(lossy, op == _LOSSY_OPCODE, Cat(*[op == o for o in _WRITE_OPCODES]).any())),
                target.first.eq(first_op),
                target.last.eq(Cat(*[op == o for o in _LAST_OPCODES]).any()),
                target.length_ok.eq((index_ok | lossy) & (header.bth_pad == 0) & (payload_len[:2] == 0)
                                    & (payload_len <= job_mtu[job])),
                target.job_id.eq(job_id[job]),
            ]
        m.d.comb += plan_from_header(look, h, hm, conn_job, conn_worker, look_lossy, packet_index < M, first)
        m.d.comb += [
            look.gap.eq((distance != 0) & (distance < _HALF)),
            look.in_seq.eq(distance == 0),
            look.behind.eq(distance >= _HALF),
            look.seq_ok.eq(first == ~view.in_msg),
            # (``decide_from_plan``'s FORWARD_GAP, from the plan alone: its header record is chosen by a register)
            look.forward_gap.eq(~hm.control & roce4 & ~hm.ack & hm.data & look.write_op & ~look_lossy & look.gap),
            look.k.eq(msg_index), look.index.eq(packet_index), look.slot.eq(in_slot),
            look.credit_ok.eq(slot_view.credit_ok),
            # the packet slot: it takes this length (empty, or holding packets of the same length), the
            # bitmap with this worker, whether that completes it, and its result slot
            look.slot_fits.eq((slot_view.bitmap == 0) | (slot_view.length == length)),
            look.bitmap.eq(slot_view.bitmap | (Const(1, N) << conn_worker)),
            look.full.eq((slot_view.bitmap | (Const(1, N) << conn_worker)) == workers_mask(conn_job)),
            look.rslot.eq(Cat(slot_view.gen, in_slot)),
            look.seq.eq(view.next_seq),
            look.through.eq(through), look.advance.eq(advance), look.ahead.eq(view.ahead),
            look.releases.eq(look_releases), look.oldest_message.eq(view.oldest_message),
        ]

        # the plan of a frame of no connection, from the header being taken: forwarded, or a control frame
        stateless_plan, taking = Signal(Plan), self.frames.payload
        m.d.comb += [stateless_plan.control.eq(taking.match.control),
                     stateless_plan.spoofed.eq(taking.match.spoofed), stateless_plan.stray.eq(taking.match.stray),
                     stateless_plan.management.eq(taking.match.management),
                     stateless_plan.refused.eq(taking.match.refused),
                     stateless_plan.plain.eq(~taking.header.roce | (taking.header.ip_version != 4)),
                     stateless_plan.stateless.eq(1)]

        # Where a frame's header beats leave no clock to spare (512 bits), an ACK (one beat) is planned as its
        # header is taken (``ack_plan``), so that back-to-back ACKs keep the line: from the state as the commit
        # in the same clock leaves it. That commit's own ACK, where it advances its connection, is seen through
        # (``ack_advancing``); if that ACK turns out dropped (``ack_dropped``), or the commit is a contribution of
        # the same job (``contributing_now``: it writes the oldest message's parts and the connections' ``sent``),
        # the plan is made again in LOOKUP, from the state written.
        plans_acks_at_take = not self.registered_take
        ack_plan = Signal(Plan)
        ack_advancing = Signal()        # the frame in STREAM is an ACK that advances ``plan.conn`` as it commits
        streaming = Signal()            # the monitor is in STREAM (where an ACK commits)
        ack_dropped = Signal()          # the commit in this clock is such an ACK, dropped after all (its facts)
        contributing_now = Signal()     # the commit in this clock is a contribution of ``plan.job``
        ack_replan = Signal()
        if plans_acks_at_take:
            head_through, head_delivers = ack_psn(taking.header)
            # Each comparison with a connection's ``delivered`` is made twice, with the register and with the
            # committing ACK's PSN (``plan.through``), and the one that holds is chosen after them (``seen``: the
            # commit writes that connection's), so that the choice is not in front of the comparisons.
            def seen(c):
                return ack_advancing & (plan.conn == c)

            def either(c, as_written, as_registered):
                return Mux(seen(c), as_written, as_registered)
            moves_registered = ack_moves(delivered[head_conn], sent[head_conn], head_through, head_delivers)
            moves_written = ack_moves(plan.through, sent[head_conn], head_through, head_delivers)
            head_advance = either(head_conn, moves_written[0], moves_registered[0])
            head_ahead = either(head_conn, moves_written[1], moves_registered[1])
            head_row = oldest_message_row(head_job, name="head_oldest_row")
            through_registered = delivered_through_last(head_row)
            through_written = covering(plan.through, head_row.last)
            head_through_last = Signal(N)
            for w in range(N):
                m.d.comb += head_through_last[w].eq(either(head_job * N + w, through_written[w], through_registered[w]))
            m.d.comb += [
                ack_plan.ack.eq(1), ack_plan.conn.eq(head_conn), ack_plan.job.eq(head_job),
                ack_plan.worker.eq(head_worker), ack_plan.through.eq(head_through),
                ack_plan.advance.eq(head_advance), ack_plan.ahead.eq(head_ahead),
                ack_plan.oldest_message.eq(head_row.message),
                ack_plan.releases.eq(ack_releases(head_job, head_worker, head_advance, head_row.held,
                                                  head_row.outside, head_row.closed, head_through_last,
                                                  covering(head_through, head_row.last))),
                ack_replan.eq(ack_dropped | (contributing_now & (plan.job == head_job))),
            ]
        # There too, a bounded-loss contribution is planned as its header is taken (``lossy_plan``): its plan is
        # of its header, its match and the configuration alone (its message is named in its payload and probed
        # while the payload streams), so it takes no LOOKUP.
        lossy_plan = Signal(Plan)
        lossy_next = Signal()       # the header being taken is of a data frame of a bounded-loss job
        if plans_acks_at_take:
            m.d.comb += [lossy_next.eq(taking.match.data & job_lossy[head_job]),
                         *plan_from_header(lossy_plan, taking.header, taking.match, head_job, head_worker, 1, 1)]

        # a retransmission (behind its connection): the message held in the window that has the PSN, if
        # any (the rare case, so it takes four more clocks: DUP_SEARCH registers each message slot's part of
        # the worker, its PSN offset, whether it is held and started, closed, and its count; DUP_TEST tests
        # them, DUP_PICK takes the first that holds the PSN, DUP_READ reads its packet slot and compares its
        # length with the frame's)
        DupPart = data.StructLayout({"offset": PSN_BITS, "held": 1, "closed": 1, "count": ceil_log2(M + 1)})
        DupTest = data.StructLayout({"held": 1, "index0": 1, "index": m_bits})
        dup_parts_now = Signal(data.ArrayLayout(DupPart, K))
        dup_parts = Signal(data.ArrayLayout(DupPart, K))
        dup_tests_now = Signal(data.ArrayLayout(DupTest, K))
        dup_tests = Signal(data.ArrayLayout(DupTest, K))
        for k in range(K):
            entry = (plan.job * K + k) * N + plan.worker
            part, offset = dup_parts[k], dup_parts[k].offset
            m.d.comb += [
                dup_parts_now[k].offset.eq(psn - wk_first[entry]),
                dup_parts_now[k].held.eq(msg_busy[plan.job * K + k] & wk_started[entry]),
                dup_parts_now[k].closed.eq(wk_closed[entry]), dup_parts_now[k].count.eq(wk_count[entry]),
                dup_tests_now[k].held.eq(part.held & (offset < _HALF) & Mux(part.closed, offset < part.count, 1)
                                         & (offset < M)),
                dup_tests_now[k].index0.eq(offset == 0),
                dup_tests_now[k].index.eq(offset[:m_bits]),
            ]
        dup_found = Signal()
        dup_index0 = Signal()
        dup_slot = Signal(slot_bits)
        for k in reversed(range(K)):        # (the first message slot that holds it)
            with m.If(dup_tests[k].held):
                m.d.comb += [dup_found.eq(1), dup_index0.eq(dup_tests[k].index0),
                             dup_slot.eq((plan.job * K + k) * M + dup_tests[k].index)]

        # the path of the payload while it streams (``unrefused``: a frame of no connection goes on when it is)
        unrefused = Signal()
        forwarding = Signal()
        contributing = Signal()
        m.d.comb += [
            unrefused.eq(~plan.control & ~plan.spoofed & ~plan.stray & ~plan.management & ~plan.refused),
            forwarding.eq(unrefused
                          & (plan.plain | plan.ack | ~plan.data | ~plan.write_op
                             | (~plan.lossy & (plan.gap | (plan.in_seq & ~plan.seq_ok)
                                               | (plan.behind & ~plan.dup_found))))),
            contributing.eq(~plan.control & ~plan.plain & plan.data & ~plan.lossy & plan.write_op & plan.in_seq
                            & plan.seq_ok & plan.credit_ok & plan.length_ok),
        ]

        beat = self.payload.payload
        beat_index = Signal(range(frame_beats + 2))
        stream_bytes = Signal(16)
        oversize = Signal()
        window = Signal(8 * WINDOW_BYTES)
        write = self.slot_write
        m.d.comb += [write.worker.eq(plan.worker), write.slot.eq(plan.slot),
                     write.beat.eq(beat_index[:beat_bits]), write.data.eq(beat.data)]

        # A bounded-loss contribution goes to packet slot 0 of message slot k = msg_seq mod K, k from byte 11 of
        # its payload (in payload beat ``key_beat``); where that is not the first beat (64 bits), each beat is
        # written into the bank a beat late (the last one in LOSSY_READ). A bank word is written only where the
        # worker's bit of the slot is clear, or where the slot's message is complete and its results have left
        # (its sum has read the banks); a frame for a slot whose sum is still to read them waits at the key beat.
        key_beat, key_lane = _MSG_SEQ_BYTE // B, _MSG_SEQ_BYTE % B
        lossy_delay = key_beat
        lossy_writing = plan.lossy & plan.write_op
        key_k = beat.data[8 * key_lane:8 * key_lane + k_bits]
        lossy_k = Signal(k_bits)
        lossy_write_ok = Signal()
        held_word = Signal(W)
        at_key = beat_index == key_beat
        k_now = Mux(at_key, key_k, lossy_k)
        lossy_beat = Signal(range(frame_beats + 2))
        m.d.comb += lossy_beat.eq(beat_index - lossy_delay)

        def lossy_slot(job, k):
            """Packet slot 0 of message slot ``k`` of ``job``."""
            return (job * K + k) * M

        def worker_bit(k):
            return (pk_bitmap[lossy_slot(plan.job, k)] >> plan.worker)[0]

        def results_left(k):
            message = plan.job * K + k
            return msg_complete[message] & msg_all_sent[message]

        def bank_free(k):
            return ~worker_bit(k) | results_left(k)

        # Which message slots' banks a contribution would wait on, for each job and worker (a bit each: the
        # worker's word there, the message complete and its results not yet left), registered every clock, so
        # that the key beat's ready chooses one of K registers of the plan's worker. Its results' count is read
        # as it will be (``all_sent_next``); the word and the completion as they are, a clock late but never in
        # a way that matters: while a frame streams nothing writes them, and a commit that takes the next header
        # in its clock never makes a bank wait (a bounded-loss contribution that happens there completes no
        # message).
        bank_waits = Signal(data.ArrayLayout(data.ArrayLayout(K, N), J))
        for j in range(J):
            for w in range(N):
                m.d.sync += bank_waits[j][w].eq(Cat(*[pk_bitmap[lossy_slot(j, k)][w] & msg_complete[j * K + k]
                                                      & ~unsent.all_sent_next[j * K + k] for k in range(K)]))
        lossy_wait = lossy_writing & at_key & bank_waits[plan.job][plan.worker].bit_select(key_k, 1)
        lossy_write_now = lossy_writing & (beat_index >= key_beat) & (lossy_beat < Pb) & \
            Mux(at_key, bank_free(key_k), lossy_write_ok)
        with m.If(plan.lossy):
            m.d.comb += [write.slot.eq(lossy_slot(plan.job, k_now)), write.beat.eq(lossy_beat[:beat_bits]),
                         write.data.eq(held_word if lossy_delay else beat.data)]
        # the frame so far with the beat on the parser's output (its ``keep`` contiguous, the parser's contract,
        # so counted as ``keep_count``'s tree, not a sum of its lanes): what the commit sees on the last beat
        verdict = Signal(3)
        stream_total = Signal(16)
        window_now = Signal(8 * WINDOW_BYTES)
        m.d.comb += [verdict.eq(beat.verdict.as_value()),
                     stream_total.eq(stream_bytes + keep_count(m, beat.keep, B)), window_now.eq(window)]

        # Byte counts at the commit, without adding up. Every payload beat but a frame's last is full (the
        # parser's contract: it counts a frame's bytes by whole beats), so the bytes before beat b are b B.
        # Whether the frame reaches ``target`` bytes with a beat is registered as "reached already" and the
        # one keep lane that would reach it in this beat (keep is contiguous): the lane of target - 1 (one-hot,
        # set when a header is taken) in the beat of target - 1, counted down beat by beat, so that no
        # adder or comparison of two counts comes before the marks.
        marks_at_take, marks_after_beat = [], []
        lane_bits = exact_log2(B)

        def reaches(name, target_of_next_frame):
            reached = Signal(name=f"{name}_reached")
            lanes = Signal(B, name=f"{name}_lane")              # this beat's lane that reaches it, if any
            target_lane = Signal(B, name=f"{name}_target_lane")
            beats_to = Signal(18 - lane_bits, name=f"{name}_beats_to")    # from this beat to the target's
            target = Value.cast(target_of_next_frame)
            before = Signal(len(target) + 1, name=f"{name}_before")      # target - 1 of the next frame
            m.d.comb += before.eq(target - 1)
            lane_now = Cat(*[before[:lane_bits] == i for i in range(B)])
            marks_at_take.extend([reached.eq(target == 0), target_lane.eq(lane_now),
                                  beats_to.eq(before[lane_bits:]),
                                  lanes.eq(Mux((before[lane_bits:] == 0) & (target != 0), lane_now, 0))])
            marks_after_beat.extend([reached.eq(reached | lanes.any()), lanes.eq(Mux(beats_to == 1, target_lane, 0)),
                                     beats_to.eq(Mux(beats_to == 0, 0, beats_to - 1))])
            return reached | (beat.keep & lanes).any()

        next_length = self.frames.payload.header.payload_len
        too_long = reaches("over_max_frame", self.max_frame + 1)
        ends_at_length = reaches("at_length", next_length) & ~reaches("past_length", next_length + 1)
        # (the first beat clears the bytes after it: the window is not cleared when a header is taken, so
        # that taking one loads fewer registers)
        for wb in range(max(1, WINDOW_BYTES // B)):
            with m.If(beat_index == wb):
                m.d.comb += window_now[wb * W:wb * W + min(W, 8 * WINDOW_BYTES)].eq(beat.data)
                if wb == 0 and W < 8 * WINDOW_BYTES:
                    m.d.comb += window_now[W:].eq(0)

        # --- monitor: the outcome at the commit ------------------------------------------------------------------
        # The aggregation header is checked lane by lane as its bytes pass, against the bytes expected at
        # the beat's positions (registered for the beat to come, from the plan), the beats before registered.
        def expected_header(job, seq):
            """The checked bytes of the aggregation header (None: not checked)."""
            def big(value, count):
                return [Value.cast(value)[8 * (count - 1 - i):8 * (count - i)] for i in range(count)]
            return ([Const(AGG_MAGIC >> 8, 8), Const(AGG_MAGIC & 0xFF, 8), Const(AGG_VERSION, 8),
                     Const(DTYPE_CODES[self.dtype], 8)] + big(job, 2) + [None, None] + big(seq, 4))

        header_beats = -(-len(expected_header(0, 0)) // B)
        agg_expect = Signal(W)
        agg_lanes = Signal(B)
        agg_so_far = Signal()

        seq_bytes = range(_MSG_SEQ_BYTE - 3, _MSG_SEQ_BYTE + 1)

        def expect_beat(number, job, seq, lossy):
            """Set the expected bytes and checked lanes for payload beat ``number`` (a bounded-loss
            contribution's ``msg_seq`` names its message: not checked)."""
            expected = expected_header(job, seq)
            lanes = [number * B + lane for lane in range(B)]
            checked = [i < len(expected) and expected[i] is not None for i in lanes]
            return [agg_lanes.eq(Cat(*[(~lossy if i in seq_bytes else Const(1)) if c else Const(0)
                                       for i, c in zip(lanes, checked, strict=True)])),
                    agg_expect.eq(Cat(*[expected[i] if c else Const(0, 8)
                                        for i, c in zip(lanes, checked, strict=True)]))]

        agg_beat_ok = Cat(*[(beat.data[8 * lane:8 * lane + 8] == agg_expect[8 * lane:8 * lane + 8]) | ~agg_lanes[lane]
                            for lane in range(B)]).all()
        agg_ok = reaches("aggregation_header", 16) & agg_so_far & agg_beat_ok
        # a control request (the rare case: checked in clocks of its own, CONTROL_PARSE, CONTROL_CHECK, CONTROL,
        # from the whole frame as kept): the UDP payload follows 14 (+4 with a VLAN tag) + 20 + 8 bytes
        # ``results``: a RESULT_REQUEST (a bounded-loss receiver asks for message ``value`` again), else a
        # CREDIT_REQUEST
        Request = data.StructLayout({"ok": 1, "found": 1, "j": job_bits, "worker": 8, "results": 1, "value": 32})
        parsed_request = Signal(Request)
        request = Signal(Request)
        request_job = Signal(16)

        m.submodules.requests = requests = RequestDecoder()
        m.d.comb += [requests.window.eq(window), requests.kept.eq(stream_bytes), requests.tagged.eq(h.vlan_valid),
                     requests.udp_length.eq(h.udp_len),
                     parsed_request.ok.eq(requests.control.ok), parsed_request.results.eq(requests.control.results),
                     request_job.eq(requests.control.job), parsed_request.worker.eq(requests.control.worker),
                     parsed_request.value.eq(requests.control.value)]
        for j in reversed(range(J)):
            with m.If(job_valid[j] & (job_id[j] == request_job)):
                m.d.comb += [parsed_request.j.eq(j), parsed_request.found.eq(1)]
        request_j, request_worker = request.j, request.worker
        request_conn = request_j * N + request_worker[:worker_bits]
        request_valid = Signal()       # registered in CONTROL_CHECK
        # a CREDIT_REQUEST from the worker's requester as bound: its IP, MAC, port and VLAN; a RESULT_REQUEST
        # (bounded-loss jobs only) from its responder: IP, MAC and VLAN; a bounded-loss job's port is not compared
        # (the match compared the frame with every connection: ``from_requester``, ``from_responder``)
        request_lossy = job_lossy[request_j]
        request_found_valid = (
            request.ok & request.found & (request_worker < job_n[request_j]) & conn_valid[request_conn]
            & Mux(request.results, request_lossy & hm.from_responder.bit_select(request_conn, 1),
                  hm.from_requester.bit_select(request_conn, 1)))

        # a management request from the manager (the match has checked its addresses: untagged, so the UDP
        # payload follows 42 bytes), checked in MANAGEMENT from the frame as kept; the agent applies it
        managing = Signal()         # the monitor is in MANAGEMENT
        management_ok = Signal()
        m.d.comb += management_ok.eq(requests.management.ok)
        if self.management is not None:
            operation = self.management_request.payload
            m.d.comb += [operation.write.eq(requests.management.write),
                         operation.sequence.eq(requests.management.sequence),
                         operation.address.eq(requests.management.address),
                         operation.value.eq(requests.management.value), operation.port.eq(hm.port)]
            agent_ready = self.management_request.ready
        else:
            agent_ready = Const(1)

        bad = h.roce & ~(verdict[0] & ((h.ip_version != 4) | verdict[1]))
        # What the last beat settles of a frame (``Facts``): with the beat on the parser's output as the last
        # (``beat_facts``), and as registered at the last beat taken (``last_facts``: for the states that
        # decide after it, ``COMMIT``, ``CONTROL``, ``MANAGEMENT``, ``LOSSY``).
        Facts = data.StructLayout({"bad": 1, "icrc_ok": 1, "oversize": 1, "agg_ok": 1, "ends": 1})
        beat_facts = Signal(Facts)
        last_facts = Signal(Facts)
        m.d.comb += [beat_facts.bad.eq(bad), beat_facts.icrc_ok.eq(verdict[0]),
                     beat_facts.oversize.eq(oversize | too_long), beat_facts.agg_ok.eq(agg_ok),
                     beat_facts.ends.eq(ends_at_length)]
        R = {name: i for i, name in enumerate(COUNTERS)}

        # The decision. Everything the last beat settles (the verdicts, the size, whether the aggregation
        # header is right and whether the payload ends at its length) only ever turns the plan's outcome
        # into DROP. So the plan alone says what a commit would do (``intended``, for the payload ending
        # at its length and a right header), and the last beat only whether it does (``happens``): what
        # is written and where the monitor goes next come from registers, only the write enables from the
        # beat. The outcome for each value of the two facts is worked out too, for the counters.
        def decide_from_plan(agg_ok, ends_at_length):
            """(outcome, reason) of a frame whose verdicts are good and size is within bounds."""
            outcome_, reason = (Signal(Outcome, name=f"outcome_{agg_ok.value}{ends_at_length.value}"),
                                Signal(range(len(COUNTERS)), name=f"reason_{agg_ok.value}{ends_at_length.value}"))

            def decide(kind, reason_name):
                return [outcome_.eq(Outcome[kind]), reason.eq(R[reason_name])]
            dup_length_ok = plan.dup_same_length & ends_at_length
            with m.If(plan.spoofed):
                m.d.comb += decide("DROP", "drop_spoofed")
            with m.Elif(plan.stray):
                m.d.comb += decide("DROP", "drop_control")
            with m.Elif(plan.refused):
                m.d.comb += decide("DROP", "management_refused")
            with m.Elif(plan.management):       # decided in MANAGEMENT (``managing``)
                m.d.comb += decide("DROP", "management_bad")
            with m.Elif(plan.control):
                m.d.comb += outcome_.eq(Outcome.CHECK)
            with m.Elif(plan.plain):
                m.d.comb += decide("FORWARD", "forwarded")
            with m.Elif(plan.ack):
                m.d.comb += decide("ACK", "forwarded")
            with m.Elif(plan.data):
                with m.If(~plan.write_op):
                    m.d.comb += decide("FORWARD", "passthrough_opcode")
                with m.Elif(plan.lossy):        # decided in LOSSY (``lossy_committing``)
                    m.d.comb += outcome_.eq(Outcome.LOSSY)
                with m.Elif(plan.gap):
                    m.d.comb += decide("FORWARD_GAP", "passthrough_gap")
                with m.Elif(plan.behind):
                    with m.If(~plan.dup_found):
                        m.d.comb += decide("FORWARD", "passthrough_stale")
                    with m.Elif(~plan.dup_ready):
                        m.d.comb += decide("DROP", "duplicates_dropped")
                    with m.Elif(~dup_length_ok):
                        m.d.comb += decide("DROP", "drop_bad_length")
                    with m.Else():
                        m.d.comb += decide("DUPLICATE", "duplicates_answered")
                with m.Elif(~plan.seq_ok):
                    m.d.comb += decide("FORWARD", "passthrough_sequence")
                with m.Elif(plan.first & ~agg_ok):
                    m.d.comb += decide("DROP", "drop_bad_header")
                with m.Elif(~plan.credit_ok):
                    m.d.comb += decide("DROP", "drop_no_credit")
                with m.Elif(~plan.length_ok | ~plan.slot_fits | ~ends_at_length):
                    m.d.comb += decide("DROP", "drop_bad_length")
                with m.Else():
                    m.d.comb += decide("CONTRIBUTE", "aggregated")
            with m.Else():
                m.d.comb += decide("FORWARD", "forwarded")
            return outcome_, reason

        by_facts = [decide_from_plan(Const(agg, 1), Const(ends, 1)) for agg in (0, 1) for ends in (0, 1)]
        checking = Signal()         # the monitor is in CONTROL: a control frame's request is decided
        # the monitor is in LOSSY (``lossy_deciding``: what ``intended`` reads, from the state alone) and commits
        # the bounded-loss contribution there in this clock (``lossy_committing``: what its outcome needs)
        lossy_deciding = Signal()
        lossy_committing = Signal()
        # its decision (LOSSY)
        lossy_go = Signal()
        lossy_reason = Signal(range(len(COUNTERS)))
        intended = Signal(Outcome)
        last_outcome = Signal(Outcome)      # ``intended`` at the last beat, for COMMIT
        m.d.comb += intended.eq(Mux(managing, Outcome.MANAGE,
                                    Mux(checking, Mux(request.results, Outcome.RESULT_REQUEST, Outcome.CREDIT),
                                        Mux(lossy_deciding, Outcome.LOSSY, by_facts[0b11][0]))))
        if plans_acks_at_take:
            # From the state and the plan alone, not from whether the commit happens in this clock (its beat, the
            # slots it waits on): what it chooses reaches only a header taken in this clock (``ack_plan``), which
            # STREAM takes only with the commit, and an ACK that turns out dropped is planned again
            # (``ack_dropped``).
            m.d.comb += ack_advancing.eq(streaming & (intended == Outcome.ACK) & plan.advance)

        def needs(kind, facts):
            """What outcome ``kind`` needs of the last beat (its ``facts``). A duplicate's and a contribution's
            payload ends at its length, which is at most the MTU and so within ``max_frame``: for them the size
            needs no check. A control or management request's and a bounded-loss contribution's are decided
            in clocks of their own."""
            return {
                "FORWARD": ~facts.bad & ~facts.oversize, "FORWARD_GAP": ~facts.bad & ~facts.oversize,
                "ACK": ~facts.bad & ~facts.oversize,
                "DUPLICATE": ~facts.bad & facts.ends,
                "CONTRIBUTE": ~facts.bad & facts.ends & (facts.agg_ok | ~plan.first),
                "CREDIT": request_valid & ~facts.oversize,
                "MANAGE": management_ok & ~facts.oversize,
                "RESULT_REQUEST": request_valid & ~facts.oversize,
                "LOSSY": lossy_committing & lossy_go,
            }[kind]

        def happens(*kinds, facts=last_facts, outcome=intended):
            """The frame being committed (``outcome`` intended, ``facts`` of its last beat) has one of these
            outcomes."""
            return Cat(*[(outcome == Outcome[kind]) & needs(kind, facts) for kind in kinds]).any()

        # The reason each frame is counted under, a clock after its commit, from what the commit registered.
        Settled = data.StructLayout({"lossy": 1, "lossy_reason": range(len(COUNTERS)), "results": 1,
                                     "checking": 1, "request_valid": 1, "managing": 1, "management_ok": 1,
                                     "bad": 1, "icrc_ok": 1, "oversize": 1,
                                     "facts": 2, "reasons": 4 * len(by_facts[0][1])})
        settled = Signal(Settled)
        settling = Signal()

        def settled_by(facts, name):
            """What the counter of the frame committed with ``facts`` is chosen from."""
            now = Signal(Settled, name=name)
            m.d.comb += [
                now.lossy.eq(lossy_committing), now.lossy_reason.eq(lossy_reason), now.results.eq(request.results),
                now.checking.eq(checking), now.request_valid.eq(request_valid),
                now.managing.eq(managing), now.management_ok.eq(management_ok),
                now.bad.eq(facts.bad), now.icrc_ok.eq(facts.icrc_ok), now.oversize.eq(facts.oversize),
                now.facts.eq(Cat(facts.ends, facts.agg_ok)),
                now.reasons.eq(Cat(*[reason for _, reason in by_facts])),
            ]
            return now
        # (one for each source of the facts, whichever state commits)
        settled_now = {id(beat_facts): settled_by(beat_facts, "settled_by_beat"),
                       id(last_facts): settled_by(last_facts, "settled_by_last")}
        reason_bits = len(by_facts[0][1])
        drop_reason = Signal(range(len(COUNTERS)))
        with m.If(settled.lossy):
            m.d.comb += drop_reason.eq(settled.lossy_reason)
        with m.Elif(settled.checking):
            m.d.comb += drop_reason.eq(Mux(settled.oversize, R["drop_oversize"],
                                           Mux(settled.request_valid,
                                               Mux(settled.results, R["result_requests"], R["credit_requests"]),
                                               R["drop_control"])))
        with m.Elif(settled.managing):
            m.d.comb += drop_reason.eq(Mux(settled.oversize, R["drop_oversize"],
                                           Mux(settled.management_ok, R["management_requests"], R["management_bad"])))
        with m.Elif(settled.oversize):
            m.d.comb += drop_reason.eq(R["drop_oversize"])
        with m.Elif(settled.bad):
            m.d.comb += drop_reason.eq(Mux(settled.icrc_ok, R["drop_bad_checksum"], R["drop_bad_icrc"]))
        with m.Else():
            m.d.comb += drop_reason.eq(Array(settled.reasons[i * reason_bits:(i + 1) * reason_bits]
                                             for i in range(4))[settled.facts])
        m.d.sync += settling.eq(0)
        with m.If(settling):
            write_at([self.increments[name] for name in COUNTERS], drop_reason, 1, domain="comb")

        # the contribution's effects
        slot = plan.slot
        bitmap, full, result_slot = plan.bitmap, plan.full, plan.rslot
        packet_beats = Signal(beat_bits + 1)
        m.d.comb += packet_beats.eq((length + B - 1) >> exact_log2(B))

        # What a commit writes into the queues and the store comes from the plan alone (``intended``); every
        # commit writes its frame's fate, a record dropped unless the commit says otherwise
        fate = Signal(self.fates.payload.shape())
        # (the frame's own bytes and beats so far: with the beat on the parser's output as the last, or in
        # COMMIT, as registered)
        own_bytes = Signal(8 * OWN_BYTES)
        forward_beats = Signal(range(frame_beats + 2))
        m.d.comb += [own_bytes.eq(window_now[:8 * OWN_BYTES]), forward_beats.eq(beat_index + 1)]
        # (a contribution's header store entry, for its header and its own bytes: its slot's, or in LOSSY its
        # message's first slot's)
        store_entry = Signal.like(own_w.addr)
        m.d.comb += [
            fates.w_data.eq(fate), fate.fate.eq(Fate.DROP), fate.gap.eq(plan.forward_gap),
            store_entry.eq(slot * N + plan.worker), fate.entry.eq(store_entry),
            own_w.addr.eq(store_entry), own_w.data.eq(own_bytes),
            unsent_add_at.eq(plan.job * K + plan.k),
            new_request.slot.eq(slot), new_request.result_slot.eq(result_slot),
            new_request.beats.eq(packet_beats), new_request.mask.eq(workers_mask(plan.job)),
        ]
        with m.Switch(intended):
            with m.Case(Outcome.FORWARD, Outcome.FORWARD_GAP, Outcome.ACK):
                m.d.comb += [new_descriptor.kind.eq(FORWARD), new_descriptor.beats.eq(forward_beats)]
            with m.Case(Outcome.DUPLICATE):
                m.d.comb += [new_descriptor.kind.eq(DUPLICATE), new_descriptor.rslot.eq(plan.dup_rslot),
                             new_descriptor.index0.eq(plan.dup_index0), new_descriptor.beats.eq(packet_beats),
                             new_descriptor.length.eq(length), new_descriptor.own.eq(own_bytes)]
            with m.Case(Outcome.CREDIT):
                m.d.comb += [new_descriptor.kind.eq(CREDITS), new_descriptor.job.eq(request_j),
                             new_descriptor.worker.eq(request_worker), new_descriptor.all.eq(0),
                             new_descriptor.workers.eq(job_n[request_j]),
                             new_descriptor.value.eq(job_oldest[request_j] + Mux(request_lossy, W_lossy, K) - 1)]
            with m.Case(Outcome.CONTRIBUTE):
                m.d.comb += [new_descriptor.kind.eq(RESULTS), new_descriptor.slot.eq(slot),
                             new_descriptor.rslot.eq(result_slot), new_descriptor.index0.eq(plan.index == 0),
                             new_descriptor.beats.eq(packet_beats), new_descriptor.length.eq(length),
                             new_descriptor.job.eq(plan.job), new_descriptor.k.eq(plan.k),
                             new_descriptor.workers.eq(job_n[plan.job]), new_descriptor.all.eq(1)]

        # --- the bounded-loss class ------------------------------------------------------------------------------
        # (docs "Bounded-loss class (MLT)") A contribution's facts are registered at its last beat; LOSSY_READ reads its
        # message slot (the *probe*: of message ``seq`` of job ``job``, for ``worker``; at 512 bits read while the
        # payload streams, ``probes_in_stream``), LOSSY decides and commits. A RESULT_REQUEST probes its message in
        # RR_READ and is answered in RR_APPLY. A completion (the bitmap full at a contribution, or a deadline found in
        # EXPIRE) is applied in COMPLETE, and the job's oldest completed messages advance in ADVANCE, with their
        # CREDITs.
        Probe = data.StructLayout({"k": k_bits, "held": 1, "complete": 1, "bitmap": N, "bit": 1, "behind": 1,
                                   "in_window": 1, "length_match": 1, "length": 16, "opens": K,
                                   "resends": RESULT_RESENDS.bit_length()})
        probe_job = Signal(job_bits)
        probe_seq = Signal(32)
        probe_worker = Signal(worker_bits)
        probe_now = Signal(Probe)
        probe = Signal(Probe)
        # (with the probe, the upper bits of the message after the job's oldest's block of K: ``high_next`` below)
        probe_next_high = Signal(32 - k_bits)

        # (the probe's message, registered: at a contribution's last beat, and in CONTROL_CHECK for a request)
        def probe_for(job, seq, worker):
            return [probe_job.eq(job), probe_seq.eq(seq), probe_worker.eq(worker),
                    probe_next_high.eq(job_oldest[job][k_bits:] + 1)]
        # Where the key is in a contribution's first payload beat (512 bits and more: no beat is written late),
        # its probe is registered while the payload streams, so that a contribution of two payload beats or more
        # goes from its last beat straight to LOSSY (``probes_in_stream``); else in LOSSY_READ.
        probes_in_stream = lossy_delay == 0
        message_in_payload = big_endian(window_now, _MSG_SEQ_BYTE - 3, 4)
        probe_k = probe_seq[:k_bits]
        probe_message = probe_job * K + probe_k
        probe_slot = lossy_slot(probe_job, probe_k)
        probe_oldest = job_oldest[probe_job]
        probe_distance = Signal(32)
        m.d.comb += [
            probe_distance.eq(probe_seq - probe_oldest),
            probe_now.k.eq(probe_k),
            probe_now.held.eq(msg_busy[probe_message] & (msg_seq[probe_message] == probe_seq)),
            probe_now.complete.eq(msg_complete[probe_message]),
            probe_now.bitmap.eq(pk_bitmap[probe_slot]),
            probe_now.bit.eq((pk_bitmap[probe_slot] >> probe_worker)[0]),
            probe_now.behind.eq(probe_distance[31]),
            probe_now.in_window.eq(probe_distance < W_lossy),
            probe_now.length_match.eq((pk_bitmap[probe_slot] == 0) | (pk_len[probe_slot] == length)),
            probe_now.length.eq(pk_len[probe_slot]),
            probe_now.resends.eq(resends[probe_message * N + probe_worker]),
        ]
        # opening message ``seq`` opens every message of the window up to it that its slot does not hold.
        # Slot k's message of the window, ``oldest + position``, is k modulo K (K a power of two): its upper
        # bits are the oldest's, plus one (modulo 2^32) where k is below the oldest's slot; both compared side
        # by side.
        oldest_high = probe_oldest[k_bits:]
        high_same = Signal(K, name="probe_high_same")
        high_next = Signal(K, name="probe_high_next")
        for k in range(K):
            seq_high = msg_seq[probe_job * K + k][k_bits:]
            m.d.comb += [high_same[k].eq(seq_high == oldest_high),
                         high_next[k].eq(seq_high == probe_next_high)]
        distance_low = Signal(k_bits, name="probe_distance_low")
        m.d.comb += distance_low.eq(probe_seq[:k_bits] - probe_oldest[:k_bits])
        for k in range(K):
            position = Signal(k_bits, name=f"probe_position_{k}")
            m.d.comb += position.eq(k - probe_oldest[:k_bits])
            message = probe_job * K + k
            if K == 1 << k_bits:
                holds_window_message = (msg_seq[message][:k_bits] == k) & Mux(k < probe_oldest[:k_bits],
                                                                             high_next[k], high_same[k])
            else:       # (one message slot: no bounded-loss job)
                holds_window_message = msg_seq[message] == probe_oldest + position
            # (``position <= probe_distance``; the openings count only where the message is in the window,
            # ``probe.in_window``: its distance is below K, and its low bits alone decide)
            up_to = position <= distance_low
            m.d.comb += probe_now.opens[k].eq((position < W_lossy) & up_to
                                              & ~(msg_busy[message] & holds_window_message))

        def open_messages(job):
            """Open the messages of ``probe.opens`` of ``job`` (a register) at the arrival of the frame."""
            for jj in range(J):
                with m.If(job == jj):
                    for k in range(K):
                        message, first_slot = jj * K + k, lossy_slot(jj, k)
                        with m.If(probe.opens[k]):
                            position = (k - job_oldest[jj][:k_bits])[:k_bits]
                            m.d.sync += [msg_busy[message].eq(1), msg_seq[message].eq(job_oldest[jj] + position),
                                         msg_complete[message].eq(0), msg_opened[message].eq(h_arrival),
                                         pk_bitmap[first_slot].eq(0), pk_gen[first_slot].eq(~pk_gen[first_slot])]
                            for w in range(N):
                                m.d.sync += resends[message * N + w].eq(0)

        def reopen_clear(job):
            """Every message slot that ``probe.opens`` reopens has sent all its previous message's results and
            resends (they read its header store entries and its result entry): else the opening waits."""
            return Cat(*[~probe.opens[k] | msg_all_sent[job * K + k] for k in range(K)]).all()

        def lossy_results(job, k, length, bitmap):
            """The RESULTS descriptor of message slot ``k`` of ``job`` (completed with ``bitmap``), its result
            entry the slot's current one and its template the lowest contributor; written with its sum request
            or resend, it counts in ``unsent`` until it has left."""
            first_slot = lossy_slot(job, k)
            template = Signal(worker_bits, name="lowest_contributor")
            for w in reversed(range(N)):
                with m.If(bitmap[w]):
                    m.d.comb += template.eq(w)
            return [descriptors.w_en.eq(1), unsent_add.eq(1), unsent_add_at.eq(job * K + k),
                    new_descriptor.eq(0), new_descriptor.kind.eq(RESULTS), new_descriptor.lossy.eq(1),
                    new_descriptor.job.eq(job), new_descriptor.workers.eq(job_n[job]), new_descriptor.k.eq(k),
                    new_descriptor.slot.eq(first_slot), new_descriptor.rslot.eq(Cat(pk_gen[first_slot], first_slot)),
                    new_descriptor.index0.eq(1), new_descriptor.length.eq(length),
                    new_descriptor.beats.eq((length + B - 1) >> exact_log2(B)), new_descriptor.bitmap.eq(bitmap),
                    new_descriptor.template.eq(template)]

        # the decision of a contribution (LOSSY), in the model's order of checks
        with m.If(last_facts.oversize):
            m.d.comb += lossy_reason.eq(R["drop_oversize"])
        with m.Elif(last_facts.bad):
            m.d.comb += lossy_reason.eq(Mux(last_facts.icrc_ok, R["drop_bad_checksum"], R["drop_bad_icrc"]))
        with m.Elif(~last_facts.agg_ok):
            m.d.comb += lossy_reason.eq(R["drop_bad_header"])
        with m.Elif(probe.held & probe.bit):
            m.d.comb += lossy_reason.eq(R["duplicates_dropped"])
        with m.Elif(probe.held & probe.complete):
            m.d.comb += lossy_reason.eq(R["late"])
        with m.Elif(~probe.held & probe.behind):
            m.d.comb += lossy_reason.eq(R["late"])
        with m.Elif(~probe.held & ~probe.in_window):
            m.d.comb += lossy_reason.eq(R["drop_no_credit"])
        with m.Elif(~plan.length_ok | ~last_facts.ends | (probe.held & ~probe.length_match)):
            m.d.comb += lossy_reason.eq(R["drop_bad_length"])
        with m.Else():
            m.d.comb += [lossy_reason.eq(R["aggregated"]), lossy_go.eq(1)]
        lossy_bitmap = Mux(probe.held, probe.bitmap, 0) | (Const(1, N) << plan.worker)
        lossy_full = lossy_bitmap == workers_mask(plan.job)

        # completions: of message slot ``complete_k`` of job ``complete_job``
        complete_job = Signal(job_bits)
        complete_k = Signal(k_bits)
        complete_deadline = Signal()
        complete_message = complete_job * K + complete_k
        complete_slot = lossy_slot(complete_job, complete_k)
        complete_bitmap = pk_bitmap[complete_slot]
        complete_count = Signal(range(N + 1))
        m.d.comb += complete_count.eq(sum(complete_bitmap[w] for w in range(N)))

        # Deadlines (``deadlines.Deadlines``): while messages are open (``live``), the monitor takes a header only
        # while ``fresh`` (``due`` computed from the arrival at the head and from the state as it is), and
        # completes the ``due`` messages first (EXPIRE), ``expire`` first. ``lossy_changing``: the monitor writes
        # what ``due`` is made of (a message opens or completes, in LOSSY, RR_APPLY and COMPLETE).
        lossy_changing = Signal()
        h_arrival = Signal(32)      # the arrival of the frame the monitor holds
        m.d.comb += [deadlines.lossy.eq(Cat(*job_lossy)), deadlines.changing.eq(lossy_changing),
                     deadlines.restarting.eq(restarting)]
        for j in range(J):
            m.d.comb += [deadlines.deadline[j].eq(job_deadline[j]), deadlines.oldest[j].eq(job_oldest[j])]
        for i in range(J * K):
            m.d.comb += [deadlines.open[i].eq(msg_busy[i] & ~msg_complete[i]), deadlines.opened[i].eq(msg_opened[i])]
        live, due_live, fresh, expire = deadlines.live, deadlines.due, deadlines.fresh, deadlines.expire

        # Whether a job's window moves on (``advancing``, registered in COMPLETE and ADVANCE for the next clock):
        # its oldest message, or the one after it, held and complete. Every message slot compares its sequence
        # number with its job's oldest and with the one after it (``job_oldest + 1``, in a register of its own) in
        # parallel, so that the decision only chooses one of a job's K bits.
        advancing = Signal()
        oldest_after = registers(J, 32, "job_oldest_after")
        m.d.sync += [oldest_after[j].eq(oldest_next[j] + 1) for j in range(J)]
        holds_oldest, complete_oldest, complete_after = Signal(J * K), Signal(J * K), Signal(J * K)
        for j in range(J):
            for k in range(K):
                i = j * K + k
                m.d.comb += [holds_oldest[i].eq(msg_busy[i] & (msg_seq[i] == job_oldest[j])),
                             complete_oldest[i].eq(holds_oldest[i] & msg_complete[i]),
                             complete_after[i].eq(msg_busy[i] & msg_complete[i] & (msg_seq[i] == oldest_after[j]))]

        # --- monitor FSM -----------------------------------------------------------------------------------------
        # an ACK releases if it made the job's oldest message delivered (the plan) and its results have left
        releases = plan.releases & msg_all_sent[plan.oldest_message]
        # RELEASE frees messages while the oldest is delivered and its results have left: what decides it
        # is read in RELEASE_READ, checked in RELEASE_CHECK (the message registered)
        release_job = plan.job
        oldest = job_oldest[release_job]
        release_row = Signal(OldestRow)
        release_row_now = oldest_message_row(release_job)
        delivered_now = release_row.held & (release_row.outside
                                             | (release_row.closed & delivered_through_last(release_row))).all()
        releasable = Signal()
        released = Signal(range(J * K))
        release_allowed = Signal()      # the ACK that led to RELEASE_READ was not dropped

        # a frame commits only when every queue an outcome can add to has room (whatever its own outcome,
        # so that taking the last beat does not wait on the outcome), and ADVANCE and RELEASE queue a credit
        # only then; registered: two entries free a clock ago leave one now, for the one write a clock
        room = Signal()
        m.d.sync += room.eq((descriptors.level < descriptors.depth - 1) & (fates.level < fates.depth - 1)
                            & (sum_requests.level < sum_requests.depth - 1))

        record_pending = Signal()     # the header's record (``h``) loads from ``frames`` in this clock
        taken_now = Signal()          # a header is taken in this clock

        if self.registered_take:
            with m.If(record_pending):
                m.d.comb += [self.frames.ready.eq(1), deadlines.head.ready.eq(1)]
                m.d.sync += [h.eq(self.frames.payload.header), h_arrival.eq(deadlines.head.payload),
                             record_pending.eq(0)]

        # the next header may be taken: what ``take_header`` asks, registered. It still holds a clock later
        # where in this clock no header was taken, no bounded-loss state written and no restart pending:
        # ``frames`` and the deadlines' head are taken only by the monitor, so the header stays and its
        # stamp with it; ``due`` changes only with the head and that state (a head that came a clock ago is
        # not yet ``fresh``). ``stateless_next``: and it is of no connection.
        take_allowed = Signal()
        stateless_next = Signal()
        if self.registered_take:
            m.d.sync += [
                take_allowed.eq(self.frames.valid & ~taken_now & ~record_pending & ~lossy_changing
                                & ~restart_pending & ~self.job_enabled.any() & ~self.connection_enabled.any()
                                & ~due_live.any() & (~live.any() | fresh)),
                stateless_next.eq(~self.frames.payload.match.data & ~self.frames.payload.match.ack),
            ]

        with m.FSM(name="monitor"):
            def load_header(record_later=False):
                """Load the header at the head of ``frames`` (and its arrival) and go on with its frame; with
                ``record_later``, its fields (``h``) and its arrival load in the next clock, from
                ``record_pending`` alone (both stay at their heads until then)."""
                taken_header = self.frames.payload
                m.d.comb += taken_now.eq(1)
                if record_later:
                    m.d.sync += record_pending.eq(1)
                else:
                    m.d.comb += [self.frames.ready.eq(1), deadlines.head.ready.eq(1)]
                    m.d.sync += [h.eq(taken_header.header), h_arrival.eq(deadlines.head.payload)]
                m.d.sync += [hm.eq(taken_header.match),
                             beat_index.eq(0), stream_bytes.eq(0), *marks_at_take,
                             oversize.eq(0), lossy_write_ok.eq(0), *ack_at_take(taken_header.header)]
                # a frame of no connection (not RoCE, RoCE of no registered connection, a control frame)
                # needs no state: its plan is its match, and its payload streams the next clock
                with m.If(~taken_header.match.data & ~taken_header.match.ack):
                    m.d.sync += [plan.eq(stateless_plan), agg_so_far.eq(1)]
                    m.next = "STREAM"
                if plans_acks_at_take:
                    # an ACK planned as it is taken (``ack_plan``), or again in LOOKUP
                    with m.Elif(taken_header.match.ack):
                        m.d.sync += [plan.eq(ack_plan), agg_so_far.eq(1)]
                        with m.If(ack_replan):
                            m.next = "LOOKUP"
                        with m.Else():
                            m.next = "STREAM"
                    # a bounded-loss contribution planned as it is taken (``lossy_plan``)
                    with m.Elif(lossy_next):
                        m.d.sync += [plan.eq(lossy_plan), agg_so_far.eq(1),
                                     *expect_beat(0, lossy_plan.job_id, 0, Const(1))]
                        m.next = "STREAM"
                with m.Else():
                    m.next = "LOOKUP_READ" if read_first else "LOOKUP"

            def take_header():
                """Take the next frame's header (from IDLE, or in the clock of a commit); first complete the
                bounded-loss messages whose deadline has come (EXPIRE). With ``registered_take`` the header
                is loaded in TAKE, the clock after the decision, whose state alone enables the loads."""
                with m.If(restart_pending):
                    m.next = "IDLE"
                if bounded_loss:
                    with m.Elif(due_live.any()):
                        m.next = "EXPIRE"
                with m.Elif(self.frames.valid & (~live.any() | fresh)):
                    if self.registered_take:
                        m.next = "TAKE"
                    else:
                        load_header()

            # each worker's own PSN of the packet slot that a contribution fills (its connection's ``sent``
            # then), built once for the states that commit; where the commit has a clock of its own
            # (``registered_commit``), registered while the payload streams (the plan and the parts' first
            # PSNs hold until the commit)
            own_psn = [[Signal(PSN_BITS, name=f"own_psn_{jj}_{v}") for v in range(N)] for jj in range(J)]
            first_rows = Array(Cat(*[wk_first[i * N + v] for v in range(N)]) for i in range(J * K))
            own_psn_in_stream = []
            for jj in range(J):
                firsts = first_rows[jj * K + plan.k]
                for v in range(N):
                    value = Mux(plan.worker == v, psn, firsts[v * PSN_BITS:(v + 1) * PSN_BITS] + plan.index)
                    if self.registered_commit:
                        own_psn_in_stream.append(own_psn[jj][v].eq(value))
                    else:
                        m.d.comb += own_psn[jj][v].eq(value)

            def take_header_at_once():
                """Where a frame of no connection commits on its last beat: load the next header in this
                clock if the clock before allowed it (``take_allowed``) and it is of no connection too, its
                fields a clock later (so that back-to-back forwarded frames keep the line, and the loads of
                its fields wait on no late condition); a header of a connection goes through
                TAKE (a clock its header beats leave to spare); else IDLE decides."""
                with m.If(take_allowed & stateless_next):
                    load_header(record_later=True)
                with m.Elif(take_allowed):
                    m.next = "TAKE"
                with m.Else():
                    m.next = "IDLE"

            def commit(ring_written, facts, outcome, outcomes=tuple(Outcome.__members__), take=take_header):
                """Apply the outcome of the frame, then go on: its ``outcome`` intended, the ``facts`` of its
                last beat; ``outcomes``: those the frame can have where this is called (the others' logic is
                left out); ``take``: how the next header is taken."""
                def happens_here(*kinds):
                    kinds = [kind for kind in kinds if kind in outcomes]
                    return happens(*kinds, facts=facts, outcome=outcome) if kinds else Const(0)

                def intends(kind):
                    return outcome == Outcome[kind] if kind in outcomes else Const(0)
                count("frames_in")
                if plans_acks_at_take:      # (what an ACK taken in this clock must see of this commit)
                    if "ACK" in outcomes:
                        m.d.comb += ack_dropped.eq(ack_advancing & ~needs("ACK", facts))
                    m.d.comb += contributing_now.eq(intends("CONTRIBUTE"))
                m.d.sync += [settling.eq(1), settled.eq(settled_now[id(facts)]),
                             release_allowed.eq(needs("ACK", facts) if "ACK" in outcomes else 0)]
                m.d.comb += fates.w_en.eq(1)
                with m.If(happens_here("FORWARD", "FORWARD_GAP", "ACK")):
                    m.d.sync += ring_committed.eq(ring_cursor + ring_written)
                    m.d.comb += [fate.fate.eq(Fate.FORWARD), descriptors.w_en.eq(1)]
                with m.Else():
                    m.d.sync += ring_cursor.eq(ring_committed)
                with m.If(happens_here("DUPLICATE")):
                    m.d.comb += [fate.fate.eq(Fate.FORWARD), descriptors.w_en.eq(1)]
                with m.If(happens_here("CONTRIBUTE", "LOSSY")):
                    m.d.comb += fate.fate.eq(Fate.STORE)
                with m.If(happens_here("CREDIT")):
                    m.d.comb += descriptors.w_en.eq(1)
                    count("credits_sent")
                if self.management is not None:
                    with m.If(happens_here("MANAGE")):
                        m.d.comb += self.management_request.valid.eq(1)
                with m.If(happens_here("ACK")):
                    count("acks_seen")
                    with m.If(plan.advance):
                        write_at(delivered, plan.conn, plan.through)
                    with m.If(plan.ahead):
                        count("acks_ahead")
                # (from the plan: an ACK that turns out dropped releases nothing, ``release_allowed``)
                with m.If(intends("ACK") & releases):
                    m.next = "RELEASE_READ"
                if bounded_loss:
                    with m.Elif(happens_here("RESULT_REQUEST")):
                        m.next = "RR_READ"
                    with m.Elif(intends("LOSSY")):
                        # the next header in this clock unless the contribution opens messages (new deadlines,
                        # which ``due`` must see first) or fills its message (COMPLETE follows)
                        m.next = "IDLE"
                        with m.If(~happens_here("LOSSY") | (probe.held & ~lossy_full)):
                            take_header()
                with m.Else():
                    m.next = "IDLE"
                    take()
                if "CONTRIBUTE" in outcomes:
                    with m.If(happens_here("CONTRIBUTE")):
                        c, j, w, k = plan.conn, plan.job, plan.worker, plan.k
                        entry = (j * K + k) * N + w
                        write_at(pk_bitmap, slot, bitmap)
                        write_at(pk_len, slot, length)
                        write_at(expected, c, expected[c] + 1)
                        m.d.comb += own_w.en.eq(1)
                        with m.If(plan.first):
                            for array, index, value in ((msg_busy, j * K + k, 1), (msg_seq, j * K + k, next_seq[c]),
                                                        (wk_started, entry, 1), (wk_closed, entry, 0),
                                                        (wk_first, entry, psn), (cur_first, c, psn), (in_msg, c, 1),
                                                        (cur_k, c, k)):
                                write_at(array, index, value)
                        with m.If(plan.last):
                            for array, index, value in ((wk_closed, entry, 1), (wk_count, entry, plan.index + 1),
                                                        (in_msg, c, 0), (next_seq, c, next_seq[c] + 1),
                                                        (next_k, c, next_k[c] + 1)):
                                write_at(array, index, value)
                            m.d.comb += [last_write.addr.eq(j * K + k), last_write.en.eq(Const(1, N) << w),
                                         *[last_write.data[v].eq(psn) for v in range(N)]]
                        with m.If(full):
                            # each worker's result carries its own PSN of this packet slot: its connection's sent
                            for jj in range(J):
                                with m.If(j == jj):
                                    for v in range(N):
                                        m.d.sync += sent[jj * N + v].eq(own_psn[jj][v])
                            write_at(pk_ready, slot, 1)
                            count("results_sent", job_n[j])
                            m.d.comb += [unsent_add.eq(1), sum_requests.w_en.eq(1), descriptors.w_en.eq(1),
                                         fate.results.eq(1)]

            with m.State("IDLE"):
                m.d.comb += restarting.eq(restart_pending)
                take_header()
            if self.registered_take:
                with m.State("TAKE"):
                    # (the frame at the head and its stamp are the decision's: only the monitor takes them;
                    # the decision is the one the previous clock would have loaded the header on)
                    load_header()
                    m.d.sync += oldest_at_take
            with m.State("CONTROL_PARSE"):
                m.d.sync += request.eq(parsed_request)
                m.next = "CONTROL_CHECK"
            with m.State("CONTROL_CHECK"):
                m.d.sync += [request_valid.eq(request_found_valid),
                             *probe_for(request_j, request.value, request_worker)]
                m.next = "CONTROL"
            with m.State("CONTROL"):
                m.d.comb += checking.eq(1)
                with m.If(room):
                    commit(0, last_facts, intended, ("CREDIT", "RESULT_REQUEST"))
            with m.State("MANAGEMENT"):
                m.d.comb += managing.eq(1)
                with m.If(room & agent_ready):
                    commit(0, last_facts, intended, ("MANAGE",))
            retransmission = look.data & ~look.lossy & look.write_op & look.behind

            def plan_frame():
                """Register the plan and go on: a retransmission to the duplicate search, else to its payload."""
                m.d.sync += [plan.eq(look), agg_so_far.eq(1), *expect_beat(0, look.job_id, look.seq, look.lossy)]
                with m.If(retransmission):
                    m.next = "DUP_SEARCH"
                with m.Else():
                    m.next = "STREAM"
            if read_first:
                with m.State("LOOKUP_READ"):
                    m.d.sync += view.eq(view_now)
                    m.next = "LOOKUP_SLOT"
                with m.State("LOOKUP_SLOT"):
                    m.d.sync += slot_view.eq(slot_view_now)
                    # (a retransmission's plan needs no packet slot read: planned here, so that with the
                    # duplicate search it takes no more clocks than its header beats leave)
                    with m.If(retransmission):
                        plan_frame()
                    with m.Else():
                        m.next = "LOOKUP"
            with m.State("LOOKUP"):
                plan_frame()
            with m.State("DUP_SEARCH"):
                m.d.sync += dup_parts.eq(dup_parts_now)
                m.next = "DUP_TEST"
            with m.State("DUP_TEST"):
                m.d.sync += dup_tests.eq(dup_tests_now)
                m.next = "DUP_PICK"
            with m.State("DUP_PICK"):
                m.d.sync += [plan.dup_found.eq(dup_found), plan.dup_slot.eq(dup_slot),
                             plan.dup_index0.eq(dup_index0)]
                m.next = "DUP_READ"
            with m.State("DUP_READ"):
                m.d.sync += [plan.dup_ready.eq(pk_ready[plan.dup_slot]),
                             plan.dup_same_length.eq(pk_len[plan.dup_slot] == length),
                             plan.dup_rslot.eq(Cat(pk_gen[plan.dup_slot], plan.dup_slot))]
                m.next = "STREAM"
            with m.State("STREAM"):
                if plans_acks_at_take:
                    m.d.comb += streaming.eq(1)
                # the last beat is taken only when the queues have room (see ``room``), and commits (a control
                # frame's request is decided in CONTROL_PARSE, CONTROL_CHECK and CONTROL)
                # (a frame of no connection never waits on a bounded-loss slot: its own term, so that its last
                # beat's load of the next header, ``take_header_at_once``, does not wait on the slots either;
                # that last beat waits for its frame's record, loading a clock after the take: ``record_pending``)
                m.d.comb += self.payload.ready.eq(
                    Mux(plan.stateless,
                        (~unrefused | oversize | ring_free) & (~beat.last | (room & ~record_pending)),
                        (~forwarding | oversize | ring_free) & (~beat.last | room) & ~lossy_wait))
                m.d.sync += own_psn_in_stream
                if bounded_loss and probes_in_stream:
                    # (each clock registers the probe from the key of the clock before, once the first beat
                    # has been taken: the state it reads changes only after the last beat; a restart waits)
                    with m.If(lossy_writing):
                        m.d.sync += [*probe_for(plan.job, message_in_payload, plan.worker), probe.eq(probe_now)]
                with m.If(self.payload.valid & self.payload.ready):
                    m.d.sync += [beat_index.eq(beat_index + 1), stream_bytes.eq(stream_total), window.eq(window_now),
                                 *marks_after_beat, agg_so_far.eq(agg_so_far & agg_beat_ok)]
                    m.d.sync += expect_beat(header_beats, plan.job_id, plan.seq, plan.lossy)     # no lane checked
                    for number in range(1, header_beats):
                        with m.If(beat_index + 1 == number):
                            m.d.sync += expect_beat(number, plan.job_id, plan.seq, plan.lossy)
                    with m.If(too_long):
                        m.d.sync += oversize.eq(1)
                    ring_written = forwarding & ~oversize & ~too_long
                    with m.If(ring_written):
                        m.d.comb += [ring_w.en.eq(1), ring_w.addr.eq(ring_cursor[:ring_bits]),
                                     ring_w.data.data.eq(beat.data), ring_w.data.keep.eq(beat.keep),
                                     ring_w.data.last.eq(beat.last),
                                     ring_w.data.verdict.eq(beat.verdict.as_value())]
                        m.d.sync += ring_cursor.eq(ring_cursor + 1)
                    m.d.comb += write.valid.eq((contributing & (beat_index < Pb)) | lossy_write_now)
                    m.d.sync += held_word.eq(beat.data)
                    with m.If(at_key):
                        m.d.sync += [lossy_k.eq(key_k), lossy_write_ok.eq(bank_free(key_k))]
                    with m.If(beat.last):
                        m.d.sync += [last_facts.eq(beat_facts), last_outcome.eq(intended)]
                    with m.If(beat.last & plan.control):
                        m.next = "CONTROL_PARSE"
                    with m.Elif(beat.last & plan.management):
                        m.next = "MANAGEMENT"
                    if bounded_loss:
                        with m.Elif(beat.last & lossy_writing):
                            m.next = "LOSSY_READ"
                            if probes_in_stream:
                                # the probe registered with this beat is of this frame's message: decided next
                                with m.If(beat_index != 0):
                                    m.next = "LOSSY"
                            else:
                                m.d.sync += probe_for(plan.job, message_in_payload, plan.worker)
                    with m.Elif(beat.last):
                        if self.registered_commit:
                            with m.If(plan.stateless):
                                commit(ring_written, beat_facts, intended, ("FORWARD",),
                                       take=take_header_at_once if self.registered_take else take_header)
                            with m.Else():
                                m.next = "COMMIT"
                        else:
                            commit(ring_written, beat_facts, intended)
            if self.registered_commit:
                with m.State("COMMIT"):
                    # a frame of a connection, a clock after its last beat (in the ring already): what it
                    # does from registers, the plan, its facts and its outcome
                    m.d.comb += [own_bytes.eq(window[:8 * OWN_BYTES]), forward_beats.eq(beat_index)]
                    commit(0, last_facts, last_outcome)
            if bounded_loss:     # (the class's states: none are built without it)
                with m.State("LOSSY_READ"):
                    m.d.sync += probe.eq(probe_now)
                    if lossy_delay:         # the last beat, a beat late
                        m.d.comb += write.valid.eq(lossy_writing & lossy_write_ok & (beat_index > key_beat)
                                                   & (lossy_beat < Pb))
                    m.next = "LOSSY"
                with m.State("LOSSY"):
                    m.d.comb += lossy_deciding.eq(1)
                    with m.If(~lossy_go | probe.held | reopen_clear(plan.job)):
                        m.d.comb += lossy_committing.eq(1)
                        commit(0, last_facts, intended, ("LOSSY",))
                    with m.If(happens("LOSSY") & ~probe.held):     # the message opens (and the window's before it)
                        m.d.comb += lossy_changing.eq(1)
                        open_messages(plan.job)
                    with m.If(happens("LOSSY")):
                        first_slot = lossy_slot(plan.job, probe.k)
                        write_at(pk_len, first_slot, length)
                        write_at(pk_bitmap, first_slot, lossy_bitmap)
                        m.d.comb += [own_w.en.eq(1), store_entry.eq(first_slot * N + plan.worker),
                                     own_w.data.eq(window[:8 * OWN_BYTES])]
                        with m.If(lossy_full):
                            m.d.sync += [complete_job.eq(plan.job), complete_k.eq(probe.k), complete_deadline.eq(0)]
                            m.next = "COMPLETE"
                with m.State("RR_READ"):
                    m.d.sync += probe.eq(probe_now)
                    m.next = "RR_APPLY"
                with m.State("RR_APPLY"):
                    # a RESULT_REQUEST: the result again to the worker's receiver (refused past RESULT_RESENDS),
                    # the message opened, or stale
                    m.d.comb += lossy_changing.eq(1)
                    m.next = "IDLE"
                    with m.If(probe.held & probe.complete & (probe.bitmap != 0)):
                        with m.If(probe.resends == RESULT_RESENDS):
                            count("result_requests_refused")
                        with m.Elif(room):
                            count("results_resent")
                            m.d.comb += lossy_results(request_j, probe.k, probe.length, probe.bitmap)
                            m.d.comb += [new_descriptor.resend.eq(1), new_descriptor.worker.eq(request_worker)]
                            write_at(resends, (request_j * K + probe.k) * N + request_worker[:worker_bits],
                                     probe.resends + 1)
                        with m.Else():
                            m.next = "RR_APPLY"
                    with m.Elif(~probe.held & ~probe.behind & probe.in_window):
                        with m.If(reopen_clear(request_j)):
                            open_messages(request_j)
                        with m.Else():
                            m.next = "RR_APPLY"
                    with m.Elif(~probe.held):
                        count("result_requests_stale")
                with m.State("EXPIRE"):
                    with m.If(expire.found):
                        m.d.sync += [complete_job.eq(expire.job), complete_k.eq(expire.k), complete_deadline.eq(1)]
                        m.next = "COMPLETE"
                    with m.Else():
                        m.next = "IDLE"
                advance_oldest = job_oldest[complete_job]
                oldest_at = complete_job * K + advance_oldest[:k_bits]
                after_at = complete_job * K + oldest_after[complete_job][:k_bits]
                with m.State("COMPLETE"):
                    # the message completes with its contributors: their sum, and a result to every worker's receiver
                    m.d.comb += lossy_changing.eq(1)
                    with m.If(room):
                        write_at(msg_complete, complete_message, 1)
                        count("deadline_completions", complete_deadline)
                        histogram_bin = Mux(complete_count >= len(HISTOGRAM_COUNTERS) - 1, len(HISTOGRAM_COUNTERS) - 1,
                                            complete_count)
                        write_at([self.increments[name] for name in HISTOGRAM_COUNTERS], histogram_bin, 1,
                                 domain="comb")
                        with m.If(complete_bitmap != 0):
                            count("results_sent", job_n[complete_job])
                            m.d.comb += lossy_results(complete_job, complete_k, pk_len[complete_slot], complete_bitmap)
                            # (a fate of no frame: the RESULTS descriptor's, after every contribution's record)
                            m.d.comb += [fates.w_en.eq(1), fate.fate.eq(Fate.NONE), fate.results.eq(1)]
                            m.d.comb += [new_descriptor.all.eq(1), sum_requests.w_en.eq(1),
                                         new_request.slot.eq(complete_slot),
                                         new_request.result_slot.eq(new_descriptor.rslot),
                                         new_request.beats.eq(new_descriptor.beats),
                                         new_request.mask.eq(complete_bitmap)]
                        # (whether the job's oldest message is complete now: this one, or one completed before)
                        m.d.sync += advancing.eq(complete_oldest.bit_select(oldest_at, 1)
                                                 | (holds_oldest.bit_select(oldest_at, 1)
                                                    & (complete_k == advance_oldest[:k_bits])))
                        m.next = "ADVANCE"
                with m.State("ADVANCE"):
                    # the job's oldest message completed: the window moves on, and every worker gets a CREDIT; whether
                    # the message after it is complete too is registered for the next clock (no state it reads is
                    # written here). (The window's oldest is not what ``due`` is made of: no ``lossy_changing``.)
                    with m.If(~advancing):
                        m.next = "IDLE"
                        take_header()
                    with m.Elif(room):
                        write_at(oldest_next, complete_job, advance_oldest + 1, domain="comb")
                        count("credits_sent", job_n[complete_job])
                        m.d.comb += [descriptors.w_en.eq(1), new_descriptor.eq(0), new_descriptor.kind.eq(CREDITS),
                                     new_descriptor.job.eq(complete_job), new_descriptor.all.eq(1),
                                     new_descriptor.workers.eq(job_n[complete_job]),
                                     new_descriptor.value.eq(advance_oldest + W_lossy)]
                        m.d.sync += advancing.eq(complete_after.bit_select(after_at, 1))
            with m.State("RELEASE_READ"):
                m.d.sync += release_row.eq(release_row_now)
                m.next = "RELEASE_CHECK"
            with m.State("RELEASE_CHECK"):
                m.d.sync += [releasable.eq(release_allowed & delivered_now & msg_all_sent[release_row.message]),
                             released.eq(release_row.message)]
                m.next = "RELEASE"
            with m.State("RELEASE"):
                with m.If(~releasable):
                    m.next = "IDLE"
                    take_header()
                with m.Elif(room):
                    write_at(msg_busy, released, 0)
                    write_at(oldest_next, release_job, oldest + 1, domain="comb")
                    m.next = "RELEASE_READ"
                    for w in range(N):
                        write_at(wk_started, released * N + w, 0)
                        write_at(wk_closed, released * N + w, 0)
                    for i in range(M):
                        packet = released * M + i
                        write_at(pk_bitmap, packet, 0)
                        write_at(pk_ready, packet, 0)
                        write_at(pk_gen, packet, ~pk_gen[packet])
                    count("credits_sent", job_n[release_job])
                    m.d.comb += [descriptors.w_en.eq(1), new_descriptor.kind.eq(CREDITS),
                                 new_descriptor.job.eq(release_job), new_descriptor.all.eq(1),
                                 new_descriptor.workers.eq(job_n[release_job]),
                                 new_descriptor.value.eq(oldest + K)]

        # (after the monitor's writes: a bounded-loss result takes its connection's next PSN, read in the sequence
        # ``sent`` holds (the emitter says so only then: ``sent_epochs``), but not in the clock of a restart of the
        # connection, whose ``sent`` is the fresh sequence's)
        used = self.psn_used
        with m.If(used.valid & ~(restarting & restart_connections.bit_select(used.conn, 1))):
            write_at(sent, used.conn, sent[used.conn] + 1)
        return m
