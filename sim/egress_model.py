"""A clocked model of MLT's egress stage (docs/ARCHITECTURE.md, "Egress stage (MLT)"), written from its
contract.

:class:`EgressModel` is stepped one clock at a time. In each clock the caller reads :attr:`~EgressModel.i_ready`
and :attr:`~EgressModel.o_beat` (what the stage presents in this clock), then calls
:meth:`~EgressModel.tick` with the beat offered on ``i`` in this clock (or ``None``) and whether ``o`` is
ready. It keeps no memory addresses: the buffer is counted in beats and cells, frames are lists of beats.

The contract, clock by clock (``t`` is the clock; every rule reads the state at the start of ``t``):

*Input.* A beat taken at ``t`` enters stage 1 (its DSCP's class is looked up, with ``dscp_class`` as it is
at ``t``; a class number past the last counts as OTHER); the beat in stage 1 moves to stage 2 (its class's
entry is looked up; a queue past the last counts as the last) whenever stage 2 does not *hold*. Stage 2
holds while it has the first beat of a frame that is not droppable and ``room`` is false; ``i.ready`` is
low exactly when stage 1 is full and stage 2 holds. The first beat taken, and each beat taken after a
``last``, starts a frame (``first`` is not read).

*Admission*, in the clock in which stage 2 lets the first beat of a frame go: a droppable frame (``lossy``
and its class's ``droppable``) is dropped when ``occupancy >= threshold`` (THRESHOLD), else when ``room``
is false (FULL); every other frame is admitted. ``occupancy`` is the count of beats written and not yet
read; ``room`` is ``free_cells >= ceil(max_frame_beats / cell_beats)``, ``free_cells`` the cells holding
no beat. A dropped frame's beats go nowhere. An admitted frame's beats are written, one per clock as they
leave stage 2, the first ``max_frame_beats`` of them: each beat whose index in the frame is a multiple of
``cell_beats`` takes a cell. A frame with more beats is OVERSIZE: it is dropped, and its stored beats are
read (in their turn, like any frame's, and at one beat per clock whatever ``o`` does) and thrown away.
When the last beat of an admitted frame leaves stage 2 in clock ``t``, the frame joins its queue; it can
be chosen from ``t + 3``, and not before the clock after the frame before it in the queue was chosen.

*Reading.* In clock ``t`` the reader reads one beat of its frame if it has one and the frame is discarded
or ``pending < 4`` (``pending``: beats read, not discarded, and not yet taken from ``o``). Reading a beat
takes it out of ``occupancy``; reading the last beat of a cell (index ``cell_beats - 1`` modulo
``cell_beats``) or of the frame frees the cell. The reader is *free* in ``t`` if it has no frame or reads
its frame's last beat in ``t``; then the scheduler chooses a frame among the queues whose head can be
chosen, and the reader reads it from ``t + 1``.

*Scheduling.* STRICT: the lowest-numbered queue. WEIGHTED (deficit round robin in beats, charged when
chosen): each queue ``q`` has a deficit ``d[q]``. If some queue with a frame has ``d > 0``, the first of
them from the queue chosen last (that one included) is chosen; else every queue with a frame gets its
quantum (``d += max(quantum[q], 1)``) and the first one with ``d > 0`` after the queue chosen last (that
one last) is chosen, if there is one. The chosen queue's deficit loses the frame's beats. At the end of
each clock, a queue with no frame to choose keeps no positive deficit (it is set to 0; a negative one
stays); in STRICT mode every deficit is 0.

*Output.* A beat read (not discarded) in ``t`` is on ``o`` from ``t + 3``, and not before the clock after
the beat before it was taken; it stays until taken. ``first``/``last`` are the frame's first and last.

*Counters.* ``drops_threshold[c]``, ``drops_full[c]`` (per class, at admission); ``drops_oversize``;
``frames_out[c]``, ``bytes_out[c]`` (the ``keep`` bits of every beat taken from ``o``);
``high_water[q]``: the highest beat count of queue ``q`` (beats of its frames written and not yet read,
the frame being written included) at the start of any clock.
"""

from collections import deque
from dataclasses import dataclass, field

from netreduce.egress import (
    CLASSES,
    OTHER_CLASS,
    ClassEntry,
    DropReason,
    Scheduling,
    default_class_table,
    default_dscp_classes,
    default_quanta,
)

__all__ = ["EgressModel", "InBeat", "OutBeat", "OUT_DEPTH", "OUT_LATENCY", "QUEUE_LATENCY"]

OUT_DEPTH = 4           # beats read and not yet taken
OUT_LATENCY = 3         # clocks from a beat's read to ``o``
QUEUE_LATENCY = 3       # clocks from a frame's last beat to the earliest clock it can be chosen


@dataclass(frozen=True)
class InBeat:
    """A beat offered on ``i``; ``dscp`` and ``lossy`` count on a frame's first beat only."""
    data: int
    keep: int
    last: bool
    dscp: int = 0
    lossy: bool = False


@dataclass(frozen=True)
class OutBeat:
    data: int
    keep: int
    first: bool
    last: bool


@dataclass
class _Frame:
    queue: int
    cls: int
    beats: list = field(default_factory=list)   # (data, keep) of the stored beats
    oversize: bool = False
    ready_at: int = 0                           # the first clock it can be chosen
    read: int = 0                               # beats read so far


@dataclass
class _Stage:
    start: bool
    beat: InBeat
    cls: int
    entry: ClassEntry | None = None
    droppable: bool = False


class EgressModel:
    """The egress stage of ``width`` bits with ``queues`` queues, a buffer of ``depth_beats`` beats in
    cells of ``cell_beats``, frames of at most ``max_frame`` bytes (the defaults are the component's:
    docs/ARCHITECTURE.md, "Egress stage (MLT)"). Configuration: ``dscp_class`` (64 class numbers),
    ``class_table`` (one :class:`~netreduce.egress.ClassEntry` per class), ``scheduling``, ``quantum`` (per
    queue); the defaults are ``netreduce.egress``'s. Configuration attributes may be changed between clocks.

    Records: ``sent`` (``(clock, OutBeat)`` for every beat taken from ``o``), ``drops`` (``(clock, class,
    DropReason)`` per dropped frame, at its admission, or at its last beat for OVERSIZE), ``chosen``
    (``(clock, queue, data of the first beat)`` per frame the scheduler chose), and the counters
    ``drops_threshold``, ``drops_full``, ``frames_out``, ``bytes_out`` (lists per class),
    ``drops_oversize`` and ``high_water`` (list per queue).
    """

    def __init__(self, width, *, queues=4, depth_beats=None, max_frame=9216, cell_beats=None,
                 dscp_class=None, class_table=None, scheduling=Scheduling.STRICT, quantum=None):
        self.width, self.queues = width, queues
        self.beat_bytes = width // 8
        self.cell_beats = cell_beats if cell_beats is not None else max(2, 64 // self.beat_bytes)
        self.depth_beats = depth_beats if depth_beats is not None else 65536 // self.beat_bytes
        self.max_frame_beats = -(-max_frame // self.beat_bytes)
        self.max_frame_cells = -(-self.max_frame_beats // self.cell_beats)
        self.cells = self.depth_beats // self.cell_beats
        self.dscp_class = list(dscp_class if dscp_class is not None else default_dscp_classes())
        self.class_table = list(class_table if class_table is not None
                                else default_class_table(queues, self.depth_beats, self.max_frame_beats))
        self.scheduling = Scheduling(scheduling)
        self.quantum = list(quantum if quantum is not None else default_quanta(queues, self.max_frame_beats))

        self.clock = 0
        self.stage1 = self.stage2 = None
        self.between = True
        self.writing = None             # the admitted frame being written
        self.occupancy = 0
        self.queue_occupancy = [0] * queues
        self.free_cells = self.cells
        self.queued = [deque() for _ in range(queues)]
        self.reading = None             # the frame being read
        self.pending = 0
        self.out = deque()              # [clock from which it may be on ``o``, OutBeat, class]
        self.deficit = [0] * queues
        self.last_served = 0

        self.sent, self.drops, self.chosen = [], [], []
        self.drops_threshold = [0] * CLASSES
        self.drops_full = [0] * CLASSES
        self.frames_out = [0] * CLASSES
        self.bytes_out = [0] * CLASSES
        self.drops_oversize = 0
        self.high_water = [0] * queues

    # --- what the stage presents in the current clock -------------------------------------------------

    @property
    def room(self):
        return self.free_cells >= self.max_frame_cells

    def _holds(self):
        s = self.stage2
        return s is not None and s.start and not s.droppable and not self.room

    @property
    def i_ready(self):
        return self.stage1 is None or not self._holds()

    @property
    def o_beat(self):
        if self.out and self.out[0][0] <= self.clock:
            return self.out[0][1]
        return None

    # --- one clock ------------------------------------------------------------------------------------

    def tick(self, offer, o_ready):
        """Advance one clock: ``offer`` is the :class:`InBeat` valid on ``i`` in this clock (or ``None``),
        ``o_ready`` whether ``o`` takes a beat. Returns whether the offered beat was taken."""
        t = self.clock
        occupancy, room, pending, holds = self.occupancy, self.room, self.pending, self._holds()
        for q in range(self.queues):
            self.high_water[q] = max(self.high_water[q], self.queue_occupancy[q])
        taken = offer is not None and self.i_ready

        # output
        beat = self.o_beat
        took_out = beat is not None and o_ready
        if took_out:
            _, _, cls = self.out.popleft()
            self.sent.append((t, beat))
            self.bytes_out[cls] += bin(beat.keep).count("1")
            self.frames_out[cls] += beat.last
            if self.out:
                self.out[0][0] = max(self.out[0][0], t + 1)

        # reading
        read_out = False
        frame = self.reading
        if frame is not None and (frame.oversize or pending < OUT_DEPTH):
            index, count = frame.read, len(frame.beats)
            self.occupancy -= 1
            self.queue_occupancy[frame.queue] -= 1
            if index % self.cell_beats == self.cell_beats - 1 or index == count - 1:
                self.free_cells += 1
            if not frame.oversize:
                data, keep = frame.beats[index]
                self.out.append([t + OUT_LATENCY, OutBeat(data, keep, index == 0, index == count - 1), frame.cls])
                read_out = True
            frame.read += 1
            if frame.read == count:
                self.reading = None
        self.pending = pending + read_out - took_out

        # scheduling
        choosable = [bool(self.queued[q]) and self.queued[q][0].ready_at <= t for q in range(self.queues)]
        if self.reading is None and any(choosable):
            chosen = self._choose(choosable)
            if chosen is not None:
                frame = self.queued[chosen].popleft()
                self.reading = frame
                self.chosen.append((t, chosen, frame.beats[0][0]))
                self.last_served = chosen
                if self.scheduling == Scheduling.WEIGHTED:
                    self.deficit[chosen] -= len(frame.beats)
                if self.queued[chosen]:
                    self.queued[chosen][0].ready_at = max(self.queued[chosen][0].ready_at, t + 1)
        for q in range(self.queues):
            if self.scheduling != Scheduling.WEIGHTED:
                self.deficit[q] = 0
            elif not choosable[q]:
                self.deficit[q] = min(self.deficit[q], 0)

        # input stages and admission
        if not holds:
            if self.stage2 is not None:
                self._admit_and_write(self.stage2, t, occupancy, room)
            s1 = self.stage1
            if s1 is not None:
                s1.entry = self.class_table[s1.cls]
                s1.entry = ClassEntry(min(s1.entry.queue, self.queues - 1), s1.entry.droppable, s1.entry.threshold)
                s1.droppable = bool(s1.beat.lossy and s1.entry.droppable)
            self.stage2, self.stage1 = s1, None
        if taken:
            cls = self.dscp_class[offer.dscp]
            self.stage1 = _Stage(self.between, offer, cls if cls < CLASSES else OTHER_CLASS)
            self.between = bool(offer.last)

        self.clock += 1
        return taken

    def _choose(self, choosable):
        Q = self.queues
        if self.scheduling != Scheduling.WEIGHTED:
            return choosable.index(True)
        order = [(self.last_served + k) % Q for k in range(Q)]
        for q in order:
            if choosable[q] and self.deficit[q] > 0:
                return q
        for q in range(Q):
            if choosable[q]:
                self.deficit[q] += max(self.quantum[q], 1)
        for q in order[1:] + order[:1]:
            if choosable[q] and self.deficit[q] > 0:
                return q
        return None

    def _admit_and_write(self, stage, t, occupancy, room):
        if stage.start:
            reason = DropReason.NONE
            if stage.droppable and occupancy >= stage.entry.threshold:
                reason = DropReason.THRESHOLD
            elif stage.droppable and not room:
                reason = DropReason.FULL
            if reason != DropReason.NONE:
                self.drops.append((t, stage.cls, reason))
                counter = self.drops_threshold if reason == DropReason.THRESHOLD else self.drops_full
                counter[stage.cls] += 1
                self.writing = None
                return
            self.writing = _Frame(stage.entry.queue, stage.cls)
        frame = self.writing
        if frame is None:
            return                      # a beat of a dropped frame
        if len(frame.beats) < self.max_frame_beats:
            if len(frame.beats) % self.cell_beats == 0:
                self.free_cells -= 1
            frame.beats.append((stage.beat.data, stage.beat.keep))
            self.occupancy += 1
            self.queue_occupancy[frame.queue] += 1
        else:
            frame.oversize = True
        if stage.beat.last:
            if frame.oversize:
                self.drops_oversize += 1
                self.drops.append((t, frame.cls, DropReason.OVERSIZE))
            frame.ready_at = t + QUEUE_LATENCY
            self.queued[frame.queue].append(frame)
            self.writing = None
