"""Between a byte-wide MAC and the switch's datapath: bytes into beats, whole good frames only, beats into
bytes.

``MacToBeats(width)``: ``GmiiRx``'s bytes (``i``, ``MacByte``, a stream that cannot wait) packed into
beats of ``width`` bits (``o``, ``RxBeat``: a ``FrameBeat`` plus ``bad``, on the last beat; a stream that
cannot wait either). Byte ``k`` of a frame goes to lane ``k mod (width/8)`` of beat ``k div (width/8)``; a
full beat goes out when the next byte or the end marker arrives, so the last beat carries ``last``
(and at least one byte kept, unless the frame had no byte at all: then one beat with ``keep`` 0, which
is ``bad``).

``FrameFilter(width, depth_beats)``: stores each frame of ``i`` (``RxBeat``, a stream that cannot wait)
and passes it on ``o`` (a frame stream) only once its last beat is in and not ``bad``; a bad frame is
dropped whole (``drops_bad``), and so is a frame that does not fit in what is free of the buffer of
``depth_beats`` beats and the one beat waiting on ``o`` (``drops_full``: the buffer is never
overwritten). A frame leaves whole, at one beat
per clock while ``o.ready`` is high (store and forward: nothing after it can make it pause).

``BeatsToBytes(width)``: a frame stream of ``width`` bits (``i``) into ``GmiiTx``'s bytes (``o``,
``TxByte``), one a clock: the kept bytes of each beat, lane 0 first, ``last`` on the frame's last kept
byte. It takes the next beat in the clock it gives the last byte of the one it holds, so a frame that
comes in at one beat per ``width/8`` clocks leaves without a gap. A beat with no byte kept gives one
zero byte (so a frame's end is always a byte; the switch sends no such beat).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from .fp.adder import check_int
from .mac import MacByte, TxByte
from .stream import FrameBeat, check_width, frame_stream

__all__ = ["RxBeat", "MacToBeats", "FrameFilter", "BeatsToBytes"]

COUNTER_BITS = 32


def RxBeat(width):
    """A received beat: ``FrameBeat`` plus ``bad`` (meaningful on the last beat: drop the frame)."""
    return data.StructLayout({**{name: field.shape for name, field in FrameBeat(width)}, "bad": 1})


class MacToBeats(wiring.Component):
    """Bytes into beats (module documentation)."""

    def __init__(self, width):
        self.width = check_width(width)
        super().__init__({
            "i": In(stream.Signature(MacByte, always_ready=True)),
            "o": Out(stream.Signature(RxBeat(width), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        word = Signal(self.width)
        count = Signal(range(B + 1))        # bytes in ``word``
        starting = Signal(init=1)           # the next beat out starts a frame
        byte = self.i.payload
        m.d.comb += [self.o.payload.data.eq(word), self.o.payload.first.eq(starting)]
        with m.If(self.i.valid & byte.end):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.last.eq(1),
                         self.o.payload.keep.eq(Cat(*[count > lane for lane in range(B)])),
                         self.o.payload.bad.eq(byte.bad | (count == 0))]
            m.d.sync += [count.eq(0), starting.eq(1)]
        with m.Elif(self.i.valid):
            with m.If(count == B):          # the full word is not the last: out, and start the next
                m.d.comb += [self.o.valid.eq(1), self.o.payload.keep.eq((1 << B) - 1)]
                m.d.sync += [word.eq(byte.data), count.eq(1), starting.eq(0)]
            with m.Else():
                m.d.sync += [word.word_select(count[:exact_log2(B)], 8).eq(byte.data), count.eq(count + 1)]
        return m


class FrameFilter(wiring.Component):
    """Whole good frames only (module documentation). ``depth_beats``: a power of two, at least 2."""

    def __init__(self, width, depth_beats):
        self.width = check_width(width)
        check_int(depth_beats, "depth_beats", 2, 1 << 20)
        if depth_beats & (depth_beats - 1):
            raise ValueError(f"depth_beats must be a power of two, not {depth_beats}")
        self.depth_beats = depth_beats
        super().__init__({
            "i": In(stream.Signature(RxBeat(width), always_ready=True)),
            "o": Out(frame_stream(width)),
            "drops_bad": Out(COUNTER_BITS),
            "drops_full": Out(COUNTER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        W, D = self.width, self.depth_beats
        bits = ceil_log2(D)
        Stored = data.StructLayout({"data": W, "keep": W // 8, "last": 1})
        m.submodules.store = store = Memory(shape=Stored, depth=D, init=[])
        w_port, r_port = store.write_port(), store.read_port()
        written = Signal(bits + 1)          # beats written (of the frame being stored too)
        committed = Signal(bits + 1)        # beats of whole good frames
        read = Signal(bits + 1)             # beats read
        dropping = Signal()                 # the frame coming in no longer fits: it is thrown away
        beat = self.i.payload

        room = (written - read)[:bits + 1] < D
        with m.If(self.i.valid):
            with m.If(dropping | ~room):
                m.d.sync += [written.eq(committed), dropping.eq(~beat.last)]
                with m.If(beat.last):
                    m.d.sync += self.drops_full.eq(self.drops_full + 1)
            with m.Else():
                m.d.comb += [w_port.en.eq(1), w_port.addr.eq(written[:bits]),
                             w_port.data.eq(Cat(beat.data, beat.keep, beat.last))]
                m.d.sync += written.eq(written + 1)
                with m.If(beat.last & beat.bad):
                    m.d.sync += [written.eq(committed), self.drops_bad.eq(self.drops_bad + 1)]
                with m.Elif(beat.last):
                    m.d.sync += committed.eq(written + 1)

        # reading: a beat is read from the memory in the clock after its address, into ``o``, which
        # keeps it until taken
        out_valid = Signal()
        starting = Signal(init=1)
        fetch = (read != committed) & (~out_valid | self.o.ready)
        stored = data.View(Stored, r_port.data)
        m.d.comb += [r_port.addr.eq(read[:bits]), r_port.en.eq(fetch),
                     self.o.valid.eq(out_valid),
                     self.o.payload.data.eq(stored.data), self.o.payload.keep.eq(stored.keep),
                     self.o.payload.last.eq(stored.last), self.o.payload.first.eq(starting)]
        with m.If(fetch):
            m.d.sync += [read.eq(read + 1), out_valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += starting.eq(self.o.payload.last)
        return m


class BeatsToBytes(wiring.Component):
    """Beats into bytes (module documentation)."""

    def __init__(self, width):
        self.width = check_width(width)
        super().__init__({
            "i": In(frame_stream(width)),
            "o": Out(stream.Signature(TxByte)),
        })

    def elaborate(self, platform):
        m = Module()
        # The held beat shifts down a byte (and its keep a bit) as each byte goes, so the byte out is always
        # lane 0 and the last one is where lane 1 is not kept (keep is contiguous): no lane multiplexer
        # and no count of kept bytes on the transmit clock's paths.
        held = Signal(FrameBeat(self.width))
        full = Signal()                     # ``held`` has bytes to give
        final = ~held.keep[1]
        m.d.comb += [self.o.valid.eq(full),
                     self.o.payload.data.eq(Mux(held.keep[0], held.data[:8], 0)),
                     self.o.payload.last.eq(held.last & final),
                     self.i.ready.eq(~full | (self.o.ready & final))]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [held.data.eq(held.data >> 8), held.keep.eq(held.keep >> 1)]
            with m.If(final):
                m.d.sync += full.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [held.eq(self.i.payload), full.eq(1)]
        return m
