"""Between ports narrower than the switch's core and the core: beats widened, whole frames, beats narrowed.

With ports of ``w`` bits into a core of ``k·w`` bits, every port can run at line rate at once when the core
takes each port's frames ``k`` port beats at a time and never waits on a port in the middle of a frame
(docs/ARCHITECTURE.md, "Ports narrower than the core"). Per port, in: ``WidenBeats`` then ``WholeFrames``;
out: the egress stage (at the core's width) then ``NarrowBeats``.

``WidenBeats(narrow, wide)``: a frame stream of ``narrow`` bits (``i``) into one of ``wide`` bits (``o``).
Beat ``j`` of a frame goes to slice ``j mod k`` of core beat ``j div k`` (lane order kept: byte ``n`` of the
frame in lane ``n mod (wide/8)``); a core beat goes out when its ``k``-th port beat or the frame's last is
in, its unfilled slices zero and not kept. It takes a port beat every clock while ``o`` takes what it
gives (a core beat at most every clock).

``WholeFrames(width, depth_beats)``: store and forward. A frame of ``i`` goes on ``o`` only once its last
beat is in, and then at one beat per clock while ``o.ready`` is high, so whoever takes it never waits on
the port in the middle of a frame. ``i.ready`` is low while the buffer is full of frames waiting to leave.
A frame longer than the buffer cannot be whole in it: when the buffer is full and holds no whole frame,
its head frame is cut short there (``truncated`` high for a clock): what the buffer holds of it is a whole
frame, its last beat marked ``last`` on ``o``, and the rest of it is taken at a beat a clock and thrown away.
So the port never stalls, and whoever takes ``o`` never waits on a port's line rate. The switch's buffer
holds two longest frames, so a frame cut short there is one the switch drops as oversize, or one whose
bytes past the buffer are Ethernet padding the parser ignores (docs/ARCHITECTURE.md, "Ports narrower than
the core"). With ``stamp_bits``, each frame is stamped with ``now`` (a clock count of that many bits, from
the parent) in the clock its last beat goes in (or it is cut short), and ``head_stamp`` gives the stamp of
the frame on ``o``: ``hw.ports.FrameArbiter`` then takes the ports' frames oldest first.

``NarrowBeats(wide, narrow)``: a frame stream of ``wide`` bits into one of ``narrow`` bits: each core beat
as the port beats that hold its kept bytes (``keep`` is contiguous from lane 0; a beat with no byte kept
gives one port beat with none), one a clock, taking the next core beat in the clock its last port beat
goes, so a frame leaves without a gap.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .fp.adder import check_int
from .stream import check_width, frame_stream

__all__ = ["WidenBeats", "WholeFrames", "NarrowBeats", "check_port_width"]


def check_port_width(narrow, wide):
    """``wide // narrow``, the port beats of one core beat; ``narrow`` a datapath width at most ``wide``."""
    check_width(narrow)
    check_width(wide)
    if narrow > wide:
        raise ValueError(f"a port of {narrow} bits is wider than the core's {wide}")
    return wide // narrow


class WidenBeats(wiring.Component):
    """Port beats of ``narrow`` bits into core beats of ``wide`` bits (module documentation)."""

    def __init__(self, narrow, wide):
        self.narrow, self.wide = narrow, wide
        self.ratio = check_port_width(narrow, wide)
        super().__init__({"i": In(frame_stream(narrow)), "o": Out(frame_stream(wide))})

    def elaborate(self, platform):
        m = Module()
        k, nb = self.ratio, self.narrow // 8
        beat = self.i.payload
        held_data = [Signal(self.narrow, name=f"held_data_{j}") for j in range(k - 1)]
        held_keep = [Signal(nb, name=f"held_keep_{j}") for j in range(k - 1)]
        held_first = Signal()       # the frame's first beat is in slice 0 of the core beat being filled
        index = Signal(range(k))    # the slice the next port beat fills
        out_valid = Signal()
        out = Signal.like(self.o.payload)
        emit = beat.last | (index == k - 1)
        m.d.comb += [self.i.ready.eq(~emit | ~out_valid | self.o.ready),
                     self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        with m.If(self.o.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            for j in range(k - 1):
                with m.If(index == j):
                    m.d.sync += [held_data[j].eq(beat.data), held_keep[j].eq(beat.keep)]
            with m.If(index == 0):
                m.d.sync += held_first.eq(beat.first)
            with m.If(emit):
                slices = [(Mux(index > j, held_data[j], Mux(index == j, beat.data, 0)),
                           Mux(index > j, held_keep[j], Mux(index == j, beat.keep, 0))) for j in range(k - 1)]
                slices.append((Mux(index == k - 1, beat.data, 0), Mux(index == k - 1, beat.keep, 0)))
                m.d.sync += [out_valid.eq(1), index.eq(0),
                             out.data.eq(Cat(*[d for d, _ in slices])), out.keep.eq(Cat(*[kp for _, kp in slices])),
                             out.first.eq(Mux(index == 0, beat.first, held_first)), out.last.eq(beat.last)]
            with m.Else():
                m.d.sync += index.eq(index + 1)
        return m


class WholeFrames(wiring.Component):
    """Store and forward of whole frames, with backpressure (module documentation). ``depth_beats``: at
    least 2; ``stamp_bits``: 0 (no stamps) or the bits of ``now``."""

    def __init__(self, width, depth_beats, stamp_bits=0):
        self.width = check_width(width)
        self.depth_beats = check_int(depth_beats, "depth_beats", 2, 1 << 16)
        self.stamp_bits = check_int(stamp_bits, "stamp_bits", 0, 32)
        super().__init__({
            "i": In(frame_stream(width)), "o": Out(frame_stream(width)), "truncated": Out(1),
            **({"now": In(stamp_bits), "head_stamp": Out(stamp_bits)} if stamp_bits else {}),
        })

    def elaborate(self, platform):
        m = Module()
        Beat = self.i.payload.shape()
        depth = self.depth_beats
        m.submodules.store = store = SyncFIFOBuffered(width=Beat.size, depth=depth)
        whole = Signal(range(depth + 1))            # frames whose last beat is in the buffer (or cut short)
        discarding = Signal()       # the rest of a frame cut short: taken and thrown away
        short_left = Signal(range(depth + 1))       # the beats of the frame cut short still to leave
        # the buffer full of one frame that is not whole: it is cut short here
        cutting = (store.level == depth) & (whole == 0)
        head = data.View(Beat, store.r_data)
        taken = self.i.valid & self.i.ready
        writing = self.i.valid & ~discarding & ~cutting
        arrived = writing & store.w_rdy & self.i.payload.last
        out_last = head.last | (short_left == 1)     # (a frame cut short: its last stored beat)
        left = self.o.valid & self.o.ready & out_last
        m.d.comb += [store.w_en.eq(writing), store.w_data.eq(self.i.payload),
                     self.i.ready.eq(store.w_rdy | discarding | cutting),
                     self.o.valid.eq(store.r_rdy & (whole != 0)), self.o.payload.eq(head),
                     self.o.payload.last.eq(out_last), store.r_en.eq(self.o.ready & self.o.valid),
                     self.truncated.eq(cutting)]
        m.d.sync += whole.eq(whole + arrived + cutting - left)
        with m.If(cutting):
            m.d.sync += [discarding.eq(~(taken & self.i.payload.last)), short_left.eq(depth)]
        with m.Else():
            with m.If(discarding & taken & self.i.payload.last):
                m.d.sync += discarding.eq(0)
            with m.If((short_left != 0) & self.o.valid & self.o.ready):
                m.d.sync += short_left.eq(short_left - 1)
        if self.stamp_bits:     # a stamp per whole frame, in frame order
            # (read as the clock after its write, as `whole` counts the frame: no read latency)
            m.submodules.stamps = stamps = SyncFIFO(width=self.stamp_bits, depth=depth)
            m.d.comb += [stamps.w_en.eq(arrived | cutting), stamps.w_data.eq(self.now),
                         stamps.r_en.eq(left & stamps.r_rdy), self.head_stamp.eq(stamps.r_data)]
        return m


class NarrowBeats(wiring.Component):
    """Core beats of ``wide`` bits into port beats of ``narrow`` bits (module documentation)."""

    def __init__(self, wide, narrow):
        self.narrow, self.wide = narrow, wide
        self.ratio = check_port_width(narrow, wide)
        super().__init__({"i": In(frame_stream(wide)), "o": Out(frame_stream(narrow))})

    def elaborate(self, platform):
        m = Module()
        k, nb, W = self.ratio, self.narrow // 8, self.narrow
        held = Signal.like(self.i.payload)
        held_valid = Signal()
        index = Signal(range(k))        # the slice going out
        final = Signal(range(k))        # the held beat's last slice with a byte kept (0 if none)
        for j in range(1, k):
            with m.If(held.keep[j * nb:(j + 1) * nb].any()):
                m.d.comb += final.eq(j)
        ending = index == final
        slices = [(held.data[j * W:(j + 1) * W], held.keep[j * nb:(j + 1) * nb]) for j in range(k)]
        m.d.comb += [
            self.o.valid.eq(held_valid),
            self.o.payload.data.eq(_select(index, [d for d, _ in slices])),
            self.o.payload.keep.eq(_select(index, [kp for _, kp in slices])),
            self.o.payload.first.eq(held.first & (index == 0)),
            self.o.payload.last.eq(held.last & ending),
            self.i.ready.eq(~held_valid | (self.o.ready & ending)),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += index.eq(Mux(ending, 0, index + 1))
            with m.If(ending):
                m.d.sync += held_valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [held.eq(self.i.payload), held_valid.eq(1)]
        return m


def _select(index, values):
    """``values[index]`` as a chain of ``Mux``es (``values`` of one shape)."""
    result = values[0]
    for j, value in enumerate(values[1:], start=1):
        result = Mux(index == j, value, result)
    return result
