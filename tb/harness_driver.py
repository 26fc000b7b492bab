"""The Python side of tb/harness.py: fills the players' rings, reads the recorders', and lets the simulator
run free in between.

:class:`HarnessDriver` is built from ``Harness.description()`` (passed to the cocotb test in its
parameters). ``queue(player, frames, gates)`` keeps frames to play; ``await run(done, ...)`` alternates
stretches of ``chunk`` clocks of free-running simulation with filling and draining the rings, until
``done()`` holds. Frames come out in ``recorders[j].frames`` (bytes, the user bits of the last beat, the
clocks of the first and last beats); every frame a player sent has a stamp in ``players[i].stamps``.
Ring memories are read and written through the simulator's handles, in zero simulated time.
"""

import collections
import logging
import time

from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, Timer

from ..wire import line_bytes
from .harness import FrameGate, FrameStamp, beat_layout, probability_threshold, stream_layout

__all__ = ["HarnessDriver", "RecordedFrame", "HarnessTimeout"]


class HarnessTimeout(AssertionError):
    pass


RecordedFrame = collections.namedtuple("RecordedFrame", "data user first last")


def _read(handle):
    """The unsigned value of a vector signal or memory word, read straight from the simulator (a
    ``LogicArray`` per word would cost more than the simulation)."""
    bits = handle._handle.get_signal_val_binstr()
    try:
        return int(bits, 2)
    except ValueError:
        raise AssertionError(f"{handle._path} holds unknown bits: {bits}") from None


def _write(handle, value):
    """Deposit an unsigned value into a vector signal or memory word, straight to the simulator."""
    width = len(handle)
    handle._handle.set_signal_val_binstr(0, format(value & ((1 << width) - 1), f"0{width}b"))


def _pack(layout, **fields):
    value = 0
    for name, field_value in fields.items():
        field = layout[name]
        value |= (field_value & ((1 << field.width) - 1)) << field.offset
    return value


def _unpack(layout, value):
    return {name: (value >> layout[name].offset) & ((1 << layout[name].width) - 1) for name in layout.members}


class _PlayerDriver:
    def __init__(self, dut, index, description, depth, frames, lanes):
        self.handle = dut._id(f"player_{index}", extended=False)
        self.control = {name: getattr(dut, f"play__{index}__{name}") for name in ("loaded", "played", "taken",
                                                                                 "idle", "seed", "line_rate")}
        self.layout = beat_layout(description["width"], description["user"])
        self.nbytes = description["width"] // 8
        self.depth, self.frame_depth, self.lanes = depth, frames, lanes
        self.word = 0                           # the word being filled, its earlier lanes already loaded
        self.pending = collections.deque()      # (beats, gate value)
        self.loaded = self.loaded_frames = self.stamped = 0
        self.stamps = []                        # a FrameStamp dict per frame taken, in order
        self.beat_words = [self.handle.ring_beats[k] for k in range(depth // lanes)]
        self.gate_words = [self.handle.ring_gates[k] for k in range(frames)]
        self.stamp_words = [self.handle.ring_stamps[k] for k in range(frames)]

    def queue(self, frame, after_out=0, after_in=0):
        nbytes, last_shift = self.nbytes, self.layout["last"].offset
        keep_shift = self.layout["keep"].offset
        chunks = [frame[i:i + nbytes] for i in range(0, len(frame), nbytes)] or [b""]
        beats = [int.from_bytes(chunk, "little") | ((1 << len(chunk)) - 1) << keep_shift for chunk in chunks]
        beats[-1] |= 1 << last_shift
        if len(beats) > self.depth - self.lanes + 1:
            raise ValueError(f"a frame of {len(beats)} beats does not fit a ring of {self.depth}")
        self.pending.append((beats, _pack(FrameGate, after_out=after_out, after_in=after_in,
                                          line_bits=8 * line_bytes(len(frame)))))

    def fill(self):
        """Write the pending frames that fit: their beats where played ones were, their gates where
        stamped ones were. A word is written whole, so the beats of a word's previous round must all have
        been played before any beat of its next round is written (hence ``lanes - 1`` beats of room less)."""
        played = _read(self.control["played"])
        lanes, bits, words = self.lanes, self.layout.size, {}
        while self.pending:
            beats, gate = self.pending[0]
            free = self.depth - (lanes - 1) - ((self.loaded - played) & 0xFFFFFFFF)
            if len(beats) > free or self.loaded_frames - self.stamped >= self.frame_depth:
                break
            self.pending.popleft()
            for beat in beats:
                lane = self.loaded % lanes
                self.word = (self.word if lane else 0) | beat << (lane * bits)
                words[(self.loaded % self.depth) // lanes] = self.word
                self.loaded += 1
            _write(self.gate_words[self.loaded_frames % self.frame_depth], gate)
            self.loaded_frames += 1
        for index, value in words.items():
            _write(self.beat_words[index], value)
        if words:
            _write(self.control["loaded"], self.loaded)

    def drain(self):
        taken = self.taken()
        while self.stamped < taken:
            value = _read(self.stamp_words[self.stamped % self.frame_depth])
            self.stamps.append(_unpack(FrameStamp, value))
            self.stamped += 1

    def taken(self):
        return _read(self.control["taken"])


class _RecorderDriver:
    def __init__(self, dut, index, description, depth, lanes):
        self.handle = dut._id(f"recorder_{index}", extended=False)
        self.control = {name: getattr(dut, f"record__{index}__{name}") for name in ("recorded", "consumed",
                                                                                   "frames", "pauses",
                                                                                   "backpressure", "seed")}
        self.kind, self.width, self.user = description["kind"], description["width"], description["user"]
        self.entry_cycle = stream_layout(self.kind, self.width, self.user).size   # Recorder.entry: beat, cycle
        self.entry_bits = self.entry_cycle + 32
        self.depth, self.lanes = depth, lanes
        self.consumed = 0
        self.frames = []            # RecordedFrame per frame (per record, for a record port)
        self._partial = bytearray()
        self._first = None
        self.entry_words = [self.handle.ring_entries[k] for k in range(depth // lanes)]

    def drain(self):
        recorded = _read(self.control["recorded"])
        while (recorded - self.consumed) & 0xFFFFFFFF:
            word = _read(self.entry_words[(self.consumed % self.depth) // self.lanes])
            lane = self.consumed % self.lanes
            while lane < self.lanes and (recorded - self.consumed) & 0xFFFFFFFF:
                self._take(word >> (lane * self.entry_bits) & ((1 << self.entry_bits) - 1))
                self.consumed += 1
                lane += 1
        _write(self.control["consumed"], self.consumed)

    def _take(self, value):
        """One recorded entry (the beat, and the clock it was taken in above it)."""
        width, nbytes = self.width, self.width // 8
        cycle = value >> self.entry_cycle
        if self.kind == "record":
            self.frames.append(RecordedFrame(value & ((1 << width) - 1), 0, cycle, cycle))
            return
        if self._first is None:
            self._first = cycle
        data = (value & ((1 << width) - 1)).to_bytes(nbytes, "little")
        keep = value >> width & ((1 << nbytes) - 1)
        if keep & (keep + 1) == 0:          # contiguous from lane 0, as every port here keeps it
            self._partial += data[:keep.bit_length()]
        else:
            self._partial += bytes(byte for lane, byte in enumerate(data) if keep >> lane & 1)
        if value >> (width + nbytes) & 1:   # last
            user = value >> (width + nbytes + 1) & ((1 << self.user) - 1)
            self.frames.append(RecordedFrame(bytes(self._partial), user, self._first, cycle))
            self._partial = bytearray()
            self._first = None

    @property
    def pauses(self):
        return self.control["pauses"].value.to_unsigned()


class HarnessDriver:
    """Drives a ``Harness`` top (module documentation)."""

    def __init__(self, dut, description, *, clock_ns):
        self.dut = dut
        self.clock_ns = clock_ns
        self.log = logging.getLogger("cocotb.harness")
        lanes = description["lanes"]
        self.players = [_PlayerDriver(dut, i, d, description["play_depth"], description["play_frames"], lanes)
                        for i, d in enumerate(description["players"])]
        self.recorders = [_RecorderDriver(dut, j, d, description["record_depth"], lanes)
                          for j, d in enumerate(description["recorders"])]
        self.exchange_seconds = 0.0         # wall time spent filling and reading the rings

    async def start(self, *, idle=0.0, backpressure=0.0, seed=0, line_rate=0):
        """Start the clock, set the pause probabilities, the generators' seeds and the players' line pace
        (``line_rate``: a line's bits per clock, e.g. 400 for 100 Gb/s at 250 MHz; 0: none), and reset (the
        generators load their seeds in reset). Returns on a falling edge, where every later step of
        :meth:`run` also ends, so that Python never writes in the clock's rising edge."""
        dut = self.dut
        cocotb_clock = Clock(dut.clk, self.clock_ns, unit="ns")
        cocotb_clock.start()
        for i, player in enumerate(self.players):
            player.control["idle"].value = probability_threshold(idle)
            player.control["seed"].value = (seed * 7919 + 2 * i + 1) & 0xFFFFFFFF
            player.control["loaded"].value = 0
            player.control["line_rate"].value = line_rate
        for j, recorder in enumerate(self.recorders):
            recorder.control["backpressure"].value = probability_threshold(backpressure)
            recorder.control["seed"].value = (seed * 7919 + 2 * j + 1001) & 0xFFFFFFFF
            recorder.control["consumed"].value = 0
        dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await RisingEdge(dut.clk)           # the device's first clock out of reset, before any beat
        await FallingEdge(dut.clk)

    def queue(self, player, frame, *, after_out=0, after_in=0):
        """Play ``frame`` on player ``player`` once ``after_out`` frames have come out of the device and
        ``after_in`` have gone in (all ports)."""
        self.players[player].queue(frame, after_out, after_in)

    def exchange(self):
        """Read what the recorders took and the players stamped; fill the players' rings."""
        started = time.perf_counter()
        self._exchange()
        self.exchange_seconds += time.perf_counter() - started

    def _exchange(self):
        for recorder in self.recorders:
            recorder.drain()
        for player in self.players:
            player.drain()
            player.fill()

    @property
    def cycle(self):
        return self.dut.cycle.value.to_unsigned()

    async def run(self, done, *, timeout_clocks, chunk=512):
        """Run free ``chunk`` clocks at a time, exchanging between stretches, until ``done()`` (checked
        after each exchange); a :class:`HarnessTimeout` after ``timeout_clocks``."""
        end = self.cycle + timeout_clocks
        self.exchange()
        while not done():
            if self.cycle >= end:
                raise HarnessTimeout(f"not done within {timeout_clocks} clocks: "
                                     f"{[len(r.frames) for r in self.recorders]} frames out by port, "
                                     f"{[p.taken() for p in self.players]} in")
            await self._stretch(chunk)

    async def settle(self, clocks, *, chunk=512):
        """Run ``clocks`` more clocks, ``chunk`` at a time, reading everything between stretches and at the end:
        a recorder's ring fills in its ``depth`` clocks of output, and then it would hold the device back."""
        while True:
            step = min(clocks, chunk)
            await self._stretch(step)
            clocks -= step
            if clocks <= 0:
                return

    async def _stretch(self, clocks):
        """Run free for ``clocks`` clocks, then exchange."""
        await Timer(round(clocks * self.clock_ns * 1000), unit="ps")
        self.exchange()
