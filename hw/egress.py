"""MLT's egress stage in front of one output port: admission by class, priority queues in one shared
buffer, strict priority or deficit round robin.

``EgressQueues(width, *, queues=4, depth_beats=None, max_frame=9216, cell_beats=None, weighted=True)``

The contract, its timing and the choices behind it are in docs/ARCHITECTURE.md, "Egress stage (MLT)";
the model that the tests compare this component with, clock for clock, is
``netreduce.sim.egress_model.EgressModel``. In brief:

* ``i`` (``EgressBeat(width)``: a frame beat plus ``dscp`` and ``lossy``, read on a frame's first beat).
  Two registers (the DSCP lookup, then the class lookup) lead to *admission*, which decides on the first
  beat of a frame: a droppable frame (``lossy`` and its class's ``droppable``) is dropped whole when the
  buffer's occupancy is at or above its class's threshold (``THRESHOLD``) or when a largest frame would
  not fit (``FULL``); any other frame waits there until a largest frame fits, holding ``i`` (never
  dropped). An admitted frame is written at one beat per clock and never waits inside; a frame longer
  than ``max_frame`` is dropped whole (``OVERSIZE``: its stored part is thrown away unsent).
* The buffer: ``depth_beats`` beats in cells of ``cell_beats`` beats. A frame takes cells from a free list
  as it is written and links them; when its last beat is written its descriptor (first cell, beats,
  class) is queued on its class's queue. Every queue shares the whole buffer.
* ``o`` (a frame stream): the scheduler chooses a frame whenever the reader is free (strict priority, or
  deficit round robin in beats when ``scheduling`` is ``WEIGHTED``); the reader reads it at one beat per
  clock into an output FIFO (at most 4 beats read and not yet taken), so a frame starts only when all its
  beats are stored and never pauses once started, whatever ``o.ready`` does. It reads each cell's link a cell
  ahead (the first cell's when it chooses the frame, each next cell's as it moves into it), into a register
  that takes the links' block-RAM output and nothing else, and takes the next cell from that register.
* ``i.ready`` depends only on registers of this component: never on ``o.ready`` or on ``i``.

Configuration (inputs, with the default map of ``netreduce.egress`` as their init values): ``dscp_class``
(64 class numbers, one per DSCP), ``class_table`` (per class: ``queue``, ``droppable``, ``threshold``),
and with ``weighted``: ``scheduling`` (``Scheduling.STRICT``/``WEIGHTED``) and ``quantum`` (per queue,
beats). Status and counters (outputs, counters 32 bits, wrapping): ``occupancy`` (beats in the buffer),
``drops_oversize``, ``high_water[q]`` (beats), and the counters kept per class c, ``drops_threshold``,
``drops_full``, ``frames_out`` and ``bytes_out`` (``CLASS_COUNTERS``): in distributed RAM, one word per class,
read at ``counter_read`` (``n * CLASSES + c`` for the n-th kind) on ``counter_value`` ``COUNTER_READ_LATENCY``
clocks later (a read every clock: the kind and class registered, then the word).
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2, exact_log2

from ..egress import (
    CLASSES,
    DSCPS,
    MAX_DEPTH_BEATS,
    MAX_QUEUES,
    OTHER_CLASS,
    QUANTUM_LIMIT,
    DropReason,
    Scheduling,
    default_class_table,
    default_dscp_classes,
    default_quanta,
)
from ..registers import EGRESS_COUNTERS
from .fp.adder import check_int
from .free_cells import FreeCells
from .parser import keep_count
from .ports import MAX_PORTS
from .ram import NO_COLLISION, BlockRAMReadPort
from .stream import FrameBeat, check_width, frame_stream

__all__ = ["EgressQueues", "EgressBeat", "egress_stream", "FrameClass", "ClassJoin", "CLASS_COUNTERS",
           "COUNTER_READ_LATENCY", "MAX_QUEUES",
           "OUT_DEPTH", "check_geometry"]

# a frame's class as the switch gives it to the egress stage (``EgressBeat``'s fields after the beat's): its
# DSCP and class, and the port it leaves by
FrameClass = data.StructLayout({"dscp": 6, "lossy": 1, "port": range(MAX_PORTS)})
MAX_CELL_BEATS = 64
# the counters kept per class, in the register map's order, which ``counter_read`` follows
CLASS_COUNTERS = tuple(EGRESS_COUNTERS)
OUT_DEPTH = 4               # beats read from the buffer and not yet taken from ``o``: the output FIFO
COUNTER_BITS = 32
COUNTER_READ_LATENCY = 2    # clocks from ``counter_read`` to its word on ``counter_value``
CLASS_BITS = ceil_log2(CLASSES)
QUANTUM_BITS = bits_for(QUANTUM_LIMIT)
DEFAULT_BUFFER_BYTES = 65536
DEFAULT_CELL_BYTES = 64     # the shortest Ethernet frame (with its FCS)


def EgressBeat(width):
    """One beat of a frame going to the egress stage: ``hw.stream.FrameBeat`` plus the frame's class, read
    on its first beat: ``dscp`` (its IPv4 DSCP), ``lossy`` (the frame belongs to the bounded-loss class of a
    registered aggregation job: set by the switch, never taken from the frame's bytes) and ``port`` (the port
    it leaves by, which the router reads; the egress stage does not)."""
    return data.StructLayout({**{name: field.shape for name, field in FrameBeat(width)}, **FrameClass.members})


def egress_stream(width):
    return stream.Signature(EgressBeat(width))




class ClassJoin(wiring.Component):
    """``ClassJoin(width)``: each frame of ``i`` leaves on ``o`` with the next entry of ``classes`` (one
    entry per frame, in the order of the frames) in its ``dscp``, ``lossy`` and ``port`` fields, on every beat of
    it. A frame's first beat waits for its entry; the other beats go through as they come. The first beat
    after reset and each beat after a ``last`` start a frame (``i``'s ``first`` is not read).

    No register on the way: ``o.valid``, ``i.ready`` and ``classes.ready`` are functions of this clock's
    ``i.valid``, ``classes.valid`` and ``o.ready`` and one register (inside a frame or not)."""

    def __init__(self, width):
        self.width = check_width(width)
        super().__init__({
            "i": In(frame_stream(width)),
            "classes": In(stream.Signature(FrameClass)),
            "o": Out(egress_stream(width)),
        })

    def elaborate(self, platform):
        m = Module()
        starting = Signal(init=1)           # the next beat of ``i`` starts a frame
        frame_class = Signal(FrameClass)    # the class of the frame being passed on
        current = Mux(starting, self.classes.payload.as_value(), frame_class.as_value())
        go = ~starting | self.classes.valid
        m.d.comb += [
            self.o.valid.eq(self.i.valid & go),
            self.i.ready.eq(self.o.ready & go),
            self.classes.ready.eq(self.o.ready & self.i.valid & starting),
            self.o.payload.data.eq(self.i.payload.data),
            self.o.payload.keep.eq(self.i.payload.keep),
            self.o.payload.first.eq(starting),
            self.o.payload.last.eq(self.i.payload.last),
            Cat(self.o.payload.dscp, self.o.payload.lossy, self.o.payload.port).eq(current),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [starting.eq(self.i.payload.last), frame_class.eq(current)]
        return m


def check_geometry(width, queues, depth_beats, max_frame, cell_beats):
    """The checked parameters with their defaults filled in, ``(width, queues, depth_beats, max_frame,
    cell_beats, max_frame_beats)``, or a ``ValueError`` that says what is wrong."""
    check_width(width)
    check_int(queues, "queues", 1, MAX_QUEUES)
    beat_bytes = width // 8
    if cell_beats is None:
        cell_beats = max(2, DEFAULT_CELL_BYTES // beat_bytes)
    if (not isinstance(cell_beats, int) or isinstance(cell_beats, bool) or cell_beats < 2
            or cell_beats > MAX_CELL_BEATS or cell_beats & (cell_beats - 1)):
        raise ValueError(f"cell_beats must be a power of two from 2 to {MAX_CELL_BEATS} (a cell's link, read as "
                         f"the reader moves into the cell, is in its register two clocks later), not {cell_beats!r}")
    if depth_beats is None:
        depth_beats = DEFAULT_BUFFER_BYTES // beat_bytes
    check_int(depth_beats, "depth_beats", 2 * cell_beats, MAX_DEPTH_BEATS)
    if depth_beats % cell_beats:
        raise ValueError(f"depth_beats ({depth_beats}) must be a whole number of cells of {cell_beats} beats")
    check_int(max_frame, "max_frame (bytes)", 1, MAX_DEPTH_BEATS * beat_bytes)
    max_frame_beats = -(-max_frame // beat_bytes)
    if max_frame_beats > depth_beats:
        raise ValueError(f"max_frame ({max_frame} bytes, {max_frame_beats} beats) must fit in the buffer "
                         f"(depth_beats={depth_beats}): frames are stored whole before they are sent")
    return width, queues, depth_beats, max_frame, cell_beats, max_frame_beats


class EgressQueues(wiring.Component):
    """Admission, priority queues and scheduler in front of one output port (module documentation,
    docs/ARCHITECTURE.md, "Egress stage (MLT)").

    Parameters (checked here, ``ValueError`` otherwise):

    - ``width``: datapath bits (64, 128, 256, 512, 1024);
    - ``queues`` Q: priority queues, 1 to 16 (0 the highest);
    - ``depth_beats``: the buffer, in beats (default 64 KiB); a whole number of cells, at least two;
    - ``max_frame``: the longest frame in bytes (default 9216, the switch's); frames are stored whole before
      they are sent, so it must fit in the buffer;
    - ``cell_beats``: beats per buffer cell, a power of two from 2 to 64 (default 64 bytes, at least 2 beats);
    - ``weighted``: build the deficit round robin (the ``scheduling`` and ``quantum`` ports); else strict
      priority only.

    Attributes: the parameters, ``max_frame_beats``, ``cells``, ``max_frame_cells`` (free cells a frame
    needs to be admitted), ``cell_bits``, ``queue_bits``; ``config_layout`` and ``config_init`` (the
    configuration inputs as one struct, with their reset values) and ``status_layout`` (the status and
    counter outputs as one struct), for a register file that holds and reads them.
    """

    CONFIG = ("dscp_class", "class_table", "scheduling", "quantum")
    STATUS = ("occupancy", "counter_value", "drops_oversize", "high_water")

    def __init__(self, width, *, queues=4, depth_beats=None, max_frame=9216, cell_beats=None, weighted=True):
        try:
            (self.width, self.queues, self.depth_beats, self.max_frame, self.cell_beats,
             self.max_frame_beats) = check_geometry(width, queues, depth_beats, max_frame, cell_beats)
            if not isinstance(weighted, bool):
                raise ValueError(f"weighted must be True or False, not {weighted!r}")
        except ValueError:
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        self.weighted = weighted
        self.cells = self.depth_beats // self.cell_beats
        self.max_frame_cells = -(-self.max_frame_beats // self.cell_beats)
        self.cell_bits = max(1, ceil_log2(self.cells))
        self.queue_bits = max(1, ceil_log2(self.queues))
        self.threshold_bits = bits_for(self.depth_beats)

        self.entry_layout = data.StructLayout({
            "queue": self.queue_bits,
            "droppable": 1,
            "threshold": self.threshold_bits,
        })
        classes = default_class_table(self.queues, self.depth_beats, self.max_frame_beats)
        members = {
            "i": In(egress_stream(self.width)),
            "o": Out(frame_stream(self.width)),
            "dscp_class": In(data.ArrayLayout(CLASS_BITS, DSCPS), init=list(default_dscp_classes())),
            "class_table": In(data.ArrayLayout(self.entry_layout, CLASSES),
                              init=[{"queue": e.queue, "droppable": int(e.droppable), "threshold": e.threshold}
                                    for e in classes]),
        }
        if self.weighted:
            members["scheduling"] = In(Scheduling, init=Scheduling.STRICT)
            members["quantum"] = In(data.ArrayLayout(QUANTUM_BITS, self.queues),
                                    init=list(default_quanta(self.queues, self.max_frame_beats)))
        members.update({
            "occupancy": Out(range(self.depth_beats + 1)),
            "counter_read": In(range(len(CLASS_COUNTERS) * CLASSES)),
            "counter_value": Out(COUNTER_BITS),
            "drops_oversize": Out(COUNTER_BITS),
            "high_water": Out(data.ArrayLayout(COUNTER_BITS, self.queues)),
        })
        super().__init__(members)
        config = [name for name in self.CONFIG if name in members]
        self.config_layout = data.StructLayout({name: members[name].shape for name in config})
        self.config_init = {name: members[name].init for name in config}
        self.status_layout = data.StructLayout({name: members[name].shape for name in self.STATUS})

    def elaborate(self, platform):
        m = Module()
        W, Q, K = self.width, self.queues, self.cell_beats
        kb = exact_log2(K)
        cells, cell_bits = self.cells, self.cell_bits
        index_bits = max(bits_for(self.max_frame_beats), kb)      # beat index within a frame
        weighted = Signal()
        if self.weighted:
            m.d.comb += weighted.eq(self.scheduling == Scheduling.WEIGHTED)

        # ---- the buffer: beats in cells, a link per cell, a free list -----------------------------------
        word = data.StructLayout({"data": W, "keep": W // 8})
        # (a cell is written only after the reader has given it back: no word is read in the clock it is written)
        m.submodules.store = store = Memory(shape=word, depth=self.depth_beats, init=[], attrs=NO_COLLISION)
        m.submodules.store_read = store_r = BlockRAMReadPort(store)
        store_w = store.write_port()
        # (the reader reads only the links of the cells of the frame it reads, before it gives each back, all written
        # before the frame can be chosen; the writer writes only the links of cells it holds: no link is read in the
        # clock it is written)
        m.submodules.links = links = Memory(shape=cell_bits, depth=cells, init=[], attrs=NO_COLLISION)
        m.submodules.links_read = link_r = BlockRAMReadPort(links)
        link_w = links.write_port()

        # Free cells: given out from a register (``FreeCells``), never used ones first, then those the reader gave
        # back (a cell given back in one clock can be taken in the next).
        m.submodules.free_cells = free_source = FreeCells(cells)
        free_cells = Signal(range(cells + 1), init=cells)
        room = Signal(init=1)               # registered: free_cells >= max_frame_cells
        allocate = Signal()                 # the writer takes a cell this clock ...
        new_cell = Signal(cell_bits)        # ... this one
        give_back = Signal()                # the reader gives a cell back this clock ...
        given_cell = Signal(cell_bits)      # ... this one
        m.d.comb += [
            new_cell.eq(free_source.cell), free_source.take.eq(allocate),
            free_source.give.eq(give_back), free_source.given.eq(given_cell),
        ]
        # (``allocate`` is decided late in the clock, by admission, and ``give_back`` by the reader: they only
        # choose between sums and comparisons of the count with constants, made beside them)
        M = self.max_frame_cells
        m.d.sync += [free_cells.eq(Mux(allocate, Mux(give_back, free_cells, free_cells - 1),
                                       Mux(give_back, free_cells + 1, free_cells))),
                     room.eq(Mux(allocate, Mux(give_back, free_cells >= M, free_cells >= M + 1),
                                 Mux(give_back, free_cells >= M - 1, free_cells >= M)))]

        # ---- descriptors: one FIFO per queue, a frame's descriptor queued when its last beat is written --
        descriptor = data.StructLayout({
            "cell": cell_bits,                          # its first cell
            "beats": bits_for(self.max_frame_beats),    # beats stored (1 .. max_frame_beats)
            "cls": CLASS_BITS,
            "discard": 1,                               # oversize: read and thrown away, never sent
        })
        # A queue never holds more frames than there are cells, and a SyncFIFOBuffered of depth D takes a
        # write only while its memory (D - 1 entries, the output register aside) is not full: D = cells + 1
        # never refuses a write.
        fifos = []
        for q in range(Q):
            fifo = SyncFIFOBuffered(width=descriptor.size, depth=cells + 1)
            m.submodules[f"queue{q}"] = fifo
            fifos.append(fifo)

        # occupancy, in total and per queue (beats written and not yet read)
        occupancy = Signal(range(self.depth_beats + 1))
        queue_occupancy = [Signal(range(self.depth_beats + 1), name=f"occupancy{q}") for q in range(Q)]
        m.d.comb += self.occupancy.eq(occupancy)

        # ---- input: DSCP lookup, class lookup, admission -----------------------------------------------
        stage1 = data.StructLayout({"valid": 1, "start": 1, "last": 1, "data": W, "keep": W // 8,
                                    "cls": CLASS_BITS, "lossy": 1})
        stage2 = data.StructLayout({"valid": 1, "start": 1, "last": 1, "data": W, "keep": W // 8,
                                    "cls": CLASS_BITS, "queue": self.queue_bits, "droppable": 1,
                                    "threshold": self.threshold_bits})
        s1 = Signal(stage1)
        s2 = Signal(stage2)
        between = Signal(init=1)            # the next beat taken from ``i`` starts a frame

        # the first beat of a frame that may not be dropped waits in stage 2 until a largest frame fits
        hold = s2.valid & s2.start & ~s2.droppable & ~room
        m.d.comb += self.i.ready.eq(~s1.valid | ~hold)

        with m.If(self.i.ready):
            m.d.sync += s1.valid.eq(self.i.valid)
            with m.If(self.i.valid):
                looked_up = self.dscp_class[self.i.payload.dscp]
                m.d.sync += [
                    s1.start.eq(between), s1.last.eq(self.i.payload.last),
                    s1.data.eq(self.i.payload.data), s1.keep.eq(self.i.payload.keep),
                    s1.cls.eq(Mux(looked_up < CLASSES, looked_up, OTHER_CLASS)),
                    s1.lossy.eq(self.i.payload.lossy),
                    between.eq(self.i.payload.last),
                ]
        with m.If(~hold):
            entry = self.class_table[s1.cls]
            m.d.sync += [
                s2.valid.eq(s1.valid), s2.start.eq(s1.start), s2.last.eq(s1.last),
                s2.data.eq(s1.data), s2.keep.eq(s1.keep), s2.cls.eq(s1.cls),
                s2.queue.eq(Mux(entry.queue < Q, entry.queue, Q - 1)),
                s2.droppable.eq(s1.lossy & entry.droppable),
                s2.threshold.eq(entry.threshold),
            ]

        # ---- the writer --------------------------------------------------------------------------------
        w_active = Signal()                 # inside an admitted frame
        w_queue = Signal(self.queue_bits)
        w_cls = Signal(CLASS_BITS)
        w_first_cell = Signal(cell_bits)
        w_cell = Signal(cell_bits)          # the cell of the last beat written
        w_beats = Signal(index_bits)        # beats of the frame written so far
        w_oversize = Signal()

        process = s2.valid & ~hold
        start = process & s2.start
        over_threshold = s2.droppable & (occupancy >= s2.threshold)
        no_room = s2.droppable & ~room
        admit = start & ~over_threshold & ~no_room
        going_on = process & ~s2.start & w_active
        store_beat = admit | (going_on & (w_beats < self.max_frame_beats))
        index = Signal(index_bits)
        m.d.comb += index.eq(Mux(s2.start, 0, w_beats))
        cell = Signal(cell_bits)
        m.d.comb += [
            allocate.eq(store_beat & (index[:kb] == 0)),
            cell.eq(Mux(allocate, new_cell, w_cell)),
        ]
        # the writes into the buffer and the links, a clock after they are decided, from registers (the buffer's
        # block RAMs lie across the device; a beat is read three clocks after its frame's last beat at the
        # earliest, and a cell given back is taken the clock after at the earliest)
        m.d.sync += [
            store_w.addr.eq(Cat(index[:kb], cell)),
            store_w.data.data.eq(s2.data), store_w.data.keep.eq(s2.keep),
            store_w.en.eq(store_beat),
            link_w.addr.eq(w_cell), link_w.data.eq(new_cell), link_w.en.eq(allocate & ~s2.start),
        ]
        frame_queue = Mux(s2.start, s2.queue, w_queue)
        becomes_oversize = going_on & (w_beats == self.max_frame_beats)
        commit = (admit | going_on) & s2.last
        entry_out = Signal(descriptor)
        m.d.comb += [
            entry_out.cell.eq(Mux(s2.start, new_cell, w_first_cell)),
            entry_out.beats.eq(Mux(store_beat, index + 1, w_beats)),
            entry_out.cls.eq(Mux(s2.start, s2.cls, w_cls)),
            entry_out.discard.eq(~s2.start & (w_oversize | becomes_oversize)),
        ]
        for q, fifo in enumerate(fifos):
            m.d.comb += [fifo.w_data.eq(entry_out), fifo.w_en.eq(commit & (frame_queue == q))]
        with m.If(start):
            m.d.sync += [w_active.eq(admit & ~s2.last), w_queue.eq(s2.queue), w_cls.eq(s2.cls),
                         w_first_cell.eq(new_cell), w_oversize.eq(0)]
        with m.Elif(process & s2.last):
            m.d.sync += w_active.eq(0)
        with m.If(store_beat):
            m.d.sync += [w_beats.eq(index + 1), w_cell.eq(cell)]
        with m.If(becomes_oversize):
            m.d.sync += w_oversize.eq(1)

        # drop events, counted a clock later
        drop = Signal(DropReason)
        drop_cls = Signal(CLASS_BITS)
        m.d.sync += [drop.eq(DropReason.NONE), drop_cls.eq(s2.cls)]
        with m.If(start & over_threshold):
            m.d.sync += drop.eq(DropReason.THRESHOLD)
        with m.Elif(start & no_room):
            m.d.sync += drop.eq(DropReason.FULL)
        oversize_dropped = Signal()
        m.d.sync += oversize_dropped.eq(commit & entry_out.discard)

        # ---- the reader --------------------------------------------------------------------------------
        r_remaining = Signal(range(self.max_frame_beats + 1))      # beats of the frame still to read
        r_index = Signal(index_bits)
        r_cell = Signal(cell_bits)
        r_queue = Signal(self.queue_bits)
        r_cls = Signal(CLASS_BITS)
        r_discard = Signal()
        pending = Signal(range(OUT_DEPTH + 1))      # beats read and not yet taken from ``o``

        # the next cell (the link read last) in a register of its own, which takes the links' block-RAM output and
        # nothing else (the read port holds its word between reads)
        r_next = Signal(cell_bits)
        m.d.sync += r_next.eq(link_r.data)

        read = Signal()
        m.d.comb += read.eq((r_remaining != 0) & (r_discard | (pending < OUT_DEPTH)))
        last_beat = r_remaining == 1
        cell_end = (r_index[:kb] == K - 1) | last_beat
        follow = read & cell_end & ~last_beat       # the reader moves on to the frame's next cell
        m.d.comb += [
            store_r.addr.eq(Cat(r_index[:kb], r_cell)), store_r.en.eq(read),
            give_back.eq(read & cell_end), given_cell.eq(r_cell),
        ]
        with m.If(read):
            m.d.sync += [r_index.eq(r_index + 1), r_remaining.eq(r_remaining - 1)]
        with m.If(follow):
            m.d.sync += r_cell.eq(r_next)

        # (``store_beat`` is decided late, by admission, and ``read`` by the reader: they only choose between
        # the counts made beside them)
        def count(value, stored, taken):
            m.d.sync += value.eq(Mux(stored, Mux(taken, value, value + 1), Mux(taken, value - 1, value)))

        for q in range(Q):
            count(queue_occupancy[q], store_beat & (frame_queue == q), read & (r_queue == q))
        count(occupancy, store_beat, read)

        # the output FIFO: the beat read in one clock comes out of the memory in the next
        out_layout = data.StructLayout({"beat": FrameBeat(W), "cls": CLASS_BITS})
        m.submodules.out = out = SyncFIFOBuffered(width=out_layout.size, depth=OUT_DEPTH + 1)   # as above
        read_out = Signal()
        read_first = Signal()
        read_last = Signal()
        read_cls = Signal(CLASS_BITS)
        m.d.sync += [read_out.eq(read & ~r_discard), read_first.eq(r_index == 0), read_last.eq(last_beat),
                     read_cls.eq(r_cls)]
        out_w = out_layout(out.w_data)
        out_r = out_layout(out.r_data)
        m.d.comb += [
            out.w_en.eq(read_out),
            out_w.beat.data.eq(store_r.data.data), out_w.beat.keep.eq(store_r.data.keep),
            out_w.beat.first.eq(read_first), out_w.beat.last.eq(read_last), out_w.cls.eq(read_cls),
            self.o.valid.eq(out.r_rdy),
            self.o.payload.data.eq(out_r.beat.data), self.o.payload.keep.eq(out_r.beat.keep),
            self.o.payload.first.eq(out_r.beat.first), self.o.payload.last.eq(out_r.beat.last),
            out.r_en.eq(self.o.ready),
        ]
        taken = self.o.valid & self.o.ready
        m.d.sync += pending.eq(pending + (read & ~r_discard) - taken)

        # ---- the scheduler -----------------------------------------------------------------------------
        free = (r_remaining == 0) | (read & last_beat)      # the reader can take a frame for the next clock
        # each queue's head descriptor in a register of its own (``heads``, ``visible``), loaded from its FIFO's
        # output, so that the choice starts from registers and not from a block RAM's late output
        visible = Signal(Q)
        heads = [Signal(descriptor, name=f"head{q}") for q in range(Q)]

        chosen = Signal(range(Q))
        found = Signal()
        _lowest(m, visible, chosen, found)
        last_served = Signal(range(Q))       # round robin: the queue of the last frame chosen
        deficits = []
        if self.weighted:
            deficit_bits = max(QUANTUM_BITS, bits_for(self.max_frame_beats)) + 2
            deficits = [Signal(signed(deficit_bits), name=f"deficit{q}") for q in range(Q)]
            credit = Signal(Q)              # visible queues with a positive deficit
            replenished = [Signal(signed(deficit_bits), name=f"replenished{q}") for q in range(Q)]
            credit_next_round = Signal(Q)   # visible queues whose deficit is positive once replenished
            for q in range(Q):
                quantum = self.quantum[q]
                m.d.comb += [
                    replenished[q].eq(deficits[q] + Mux(quantum == 0, 1, quantum)),
                    credit[q].eq(visible[q] & (deficits[q] > 0)),
                    credit_next_round[q].eq(visible[q] & (replenished[q] > 0)),
                ]
            new_round = Signal()
            m.d.comb += new_round.eq(weighted & free & (visible != 0) & (credit == 0))
            with m.If(weighted):
                with m.If(credit != 0):
                    _round_robin(m, credit, last_served, chosen, found, include_start=True)
                with m.Else():
                    _round_robin(m, credit_next_round, last_served, chosen, found, include_start=False)

        pick = free & found
        head = Signal(descriptor)
        for q in range(Q):
            with m.If(chosen == q):
                m.d.comb += head.eq(heads[q])
            picked = pick & (chosen == q)
            m.d.comb += fifos[q].r_en.eq(fifos[q].r_rdy & (~visible[q] | picked))
            with m.If(fifos[q].r_en):
                m.d.sync += [heads[q].eq(fifos[q].r_data), visible[q].eq(1)]
            with m.Elif(picked):
                m.d.sync += visible[q].eq(0)
        with m.If(pick):
            m.d.sync += [r_cell.eq(head.cell), r_remaining.eq(head.beats), r_index.eq(0), r_queue.eq(chosen),
                         r_cls.eq(head.cls), r_discard.eq(head.discard), last_served.eq(chosen)]
        # A cell's link is read a cell ahead: the first cell's with the choice, each next cell's as the reader
        # moves into it (with the last beat of the cell before), so that it is in ``r_next`` two clocks later, by
        # the cell's last beat (a cell has 2 beats or more, read one a clock at most). One mechanism for every
        # cell size. (A choice and a move never fall in one clock: a frame is chosen when the reader reads its
        # frame's last beat or has none.)
        m.d.comb += [link_r.addr.eq(Mux(pick, head.cell, r_next)), link_r.en.eq(pick | follow)]

        for q, deficit in enumerate(deficits):
            value = Signal(signed(len(deficit)), name=f"deficit{q}_next")
            m.d.comb += value.eq(deficit)
            with m.If(new_round & visible[q]):
                m.d.comb += value.eq(replenished[q])
            charged = Signal.like(value, name=f"deficit{q}_charged")
            m.d.comb += charged.eq(Mux(pick & (chosen == q), value - head.beats, value))
            with m.If(~weighted):
                m.d.sync += deficit.eq(0)
            with m.Elif(~visible[q] & (charged > 0)):
                m.d.sync += deficit.eq(0)       # an empty queue keeps no credit (it keeps a debt)
            with m.Else():
                m.d.sync += deficit.eq(charged)

        # ---- counters ----------------------------------------------------------------------------------
        for q in range(Q):
            high_water = Signal(range(self.depth_beats + 1), name=f"high_water{q}")
            with m.If(queue_occupancy[q] > high_water):
                m.d.sync += high_water.eq(queue_occupancy[q])
            m.d.comb += self.high_water[q].eq(high_water)

        # each beat out, registered with its byte count (``keep_count``: the stream's ``keep`` is contiguous)
        out_event = Signal()
        out_cls = Signal(CLASS_BITS)
        out_bytes = Signal(range(W // 8 + 1))
        out_last = Signal()
        m.d.sync += [out_event.eq(taken), out_cls.eq(out_r.cls), out_bytes.eq(keep_count(m, out_r.beat.keep, W // 8)),
                     out_last.eq(out_r.beat.last)]
        oversize = Signal(COUNTER_BITS)
        with m.If(oversize_dropped):
            m.d.sync += oversize.eq(oversize + 1)
        m.d.comb += self.drops_oversize.eq(oversize)
        # the per-class counters: one memory per kind, a word per class, each counted by a read, an add and a
        # write in one clock (the read is asynchronous: distributed RAM), and read at ``counter_read``
        events = {"drops_threshold": (drop == DropReason.THRESHOLD, drop_cls, 1),
                  "drops_full": (drop == DropReason.FULL, drop_cls, 1),
                  "frames_out": (out_event, out_cls, out_last),
                  "bytes_out": (out_event, out_cls, out_bytes)}
        assert tuple(events) == CLASS_COUNTERS
        # the read, in two registered clocks (COUNTER_READ_LATENCY): the kind and class ``counter_read`` names,
        # then the word
        kind = Signal(range(len(CLASS_COUNTERS)))
        cls = Signal(CLASS_BITS)
        for n in range(len(CLASS_COUNTERS)):
            with m.If((self.counter_read >= n * CLASSES) & (self.counter_read < (n + 1) * CLASSES)):
                m.d.sync += [kind.eq(n), cls.eq(self.counter_read - n * CLASSES)]
        values = []
        for name, (event, event_cls, amount) in events.items():
            m.submodules[f"{name}_memory"] = memory = Memory(shape=COUNTER_BITS, depth=CLASSES, init=[])
            counted, shown, write = (memory.read_port(domain="comb"), memory.read_port(domain="comb"),
                                     memory.write_port())
            m.d.comb += [counted.addr.eq(event_cls), write.addr.eq(event_cls), write.en.eq(event),
                         write.data.eq(counted.data + amount), shown.addr.eq(cls)]
            values.append(shown.data)
        m.d.sync += self.counter_value.eq(Array(values)[kind])
        return m


def _lowest(m, bits, index, found):
    """``index``: the lowest set bit of ``bits``; ``found``: there is one."""
    m.d.comb += found.eq(bits != 0)
    for q in reversed(range(len(bits))):
        with m.If(bits[q]):
            m.d.comb += index.eq(q)


def _round_robin(m, bits, start, index, found, *, include_start):
    """``index``: the first set bit of ``bits`` in the order ``start``, ``start + 1``, ... (``start + 1``,
    ..., ``start`` without ``include_start``), wrapping; ``found``: there is one."""
    count = len(bits)
    later = Signal(count)
    for q in range(count):
        m.d.comb += later[q].eq(bits[q] & ((q >= start) if include_start else (q > start)))
    _lowest(m, Mux(later != 0, later, bits), index, found)
