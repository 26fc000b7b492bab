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
    def __init__(self, dut, index, description, depth, frames):
        self.handle = dut._id(f"player_{index}", extended=False)
        self.control = {name: getattr(dut, f"play__{index}__{name}") for name in ("loaded", "played", "taken",
                                                                                 "idle", "seed")}
        self.layout = beat_layout(description["width"], description["user"])
        self.nbytes = description["width"] // 8
        self.depth, self.frame_depth = depth, frames
        self.pending = collections.deque()      # (beats, gate value)
        self.loaded = self.loaded_frames = self.stamped = 0
        self.stamps = []                        # a FrameStamp dict per frame taken, in order
        self.beat_words = [self.handle.ring_beats[k] for k in range(depth)]
        self.gate_words = [self.handle.ring_gates[k] for k in range(frames)]
        self.stamp_words = [self.handle.ring_stamps[k] for k in range(frames)]

    def queue(self, frame, after_out=0, after_in=0):
        nbytes, last_shift = self.nbytes, self.layout["last"].offset
        keep_shift = self.layout["keep"].offset
        chunks = [frame[i:i + nbytes] for i in range(0, len(frame), nbytes)] or [b""]
        beats = [int.from_bytes(chunk, "little") | ((1 << len(chunk)) - 1) << keep_shift for chunk in chunks]
        beats[-1] |= 1 << last_shift
        if len(beats) > self.depth:
            raise ValueError(f"a frame of {len(beats)} beats does not fit a ring of {self.depth}")
        self.pending.append((beats, _pack(FrameGate, after_out=after_out, after_in=after_in)))

    def fill(self):
        """Write the pending frames that fit: their beats where played ones were, their gates where
        stamped ones were."""
        played = _read(self.control["played"])
        wrote = False
        while self.pending:
            beats, gate = self.pending[0]
            free = self.depth - ((self.loaded - played) & 0xFFFFFFFF)
            if len(beats) > free or self.loaded_frames - self.stamped >= self.frame_depth:
                break
            self.pending.popleft()
            for beat in beats:
                _write(self.beat_words[self.loaded % self.depth], beat)
                self.loaded += 1
            _write(self.gate_words[self.loaded_frames % self.frame_depth], gate)
            self.loaded_frames += 1
            wrote = True
        if wrote:
            _write(self.control["loaded"], self.loaded)

    def drain(self):
        taken = self.taken()
        while self.stamped < taken:
            value = _read(self.stamp_words[self.stamped % self.frame_depth])
            self.stamps.append(_unpack(FrameStamp, value))
            self.stamped += 1

    def taken(self):
        return _read(self.control["taken"])

    def idle(self):
        """Nothing left to play."""
        return not self.pending and self.control["played"].value.to_unsigned() == self.loaded & 0xFFFFFFFF


class _RecorderDriver:
    def __init__(self, dut, index, description, depth):
        self.handle = dut._id(f"recorder_{index}", extended=False)
        self.control = {name: getattr(dut, f"record__{index}__{name}") for name in ("recorded", "consumed",
                                                                                   "frames", "pauses",
                                                                                   "backpressure", "seed")}
        self.kind, self.width, self.user = description["kind"], description["width"], description["user"]
        self.entry_cycle = stream_layout(self.kind, self.width, self.user).size   # Recorder.entry: beat, cycle
        self.depth = depth
        self.consumed = 0
        self.frames = []            # RecordedFrame per frame (per record, for a record port)
        self._partial = bytearray()
        self._first = None
        self.entry_words = [self.handle.ring_entries[k] for k in range(depth)]

    def drain(self):
        recorded = _read(self.control["recorded"])
        width, nbytes = self.width, self.width // 8
        data_mask, keep_mask = (1 << width) - 1, (1 << nbytes) - 1
        user_shift = width + nbytes + 1
        while (recorded - self.consumed) & 0xFFFFFFFF:
            value = _read(self.entry_words[self.consumed % self.depth])
            cycle = value >> self.entry_cycle
            self.consumed += 1
            if self.kind == "record":
                self.frames.append(RecordedFrame(value & data_mask, 0, cycle, cycle))
                continue
            if self._first is None:
                self._first = cycle
            data = (value & data_mask).to_bytes(nbytes, "little")
            keep = value >> width & keep_mask
            if keep & (keep + 1) == 0:          # contiguous from lane 0, as every port here keeps it
                self._partial += data[:keep.bit_length()]
            else:
                self._partial += bytes(byte for lane, byte in enumerate(data) if keep >> lane & 1)
            if value >> (width + nbytes) & 1:   # last
                user = value >> user_shift & ((1 << self.user) - 1)
                self.frames.append(RecordedFrame(bytes(self._partial), user, self._first, cycle))
                self._partial = bytearray()
                self._first = None
        _write(self.control["consumed"], self.consumed)

    @property
    def pauses(self):
        return self.control["pauses"].value.to_unsigned()


class HarnessDriver:
    """Drives a ``Harness`` top (module documentation)."""

    def __init__(self, dut, description, *, clock_ns):
        self.dut = dut
        self.clock_ns = clock_ns
        self.log = logging.getLogger("cocotb.harness")
        self.players = [_PlayerDriver(dut, i, d, description["play_depth"], description["play_frames"])
                        for i, d in enumerate(description["players"])]
        self.recorders = [_RecorderDriver(dut, j, d, description["record_depth"])
                          for j, d in enumerate(description["recorders"])]
        self.exchange_seconds = 0.0         # wall time spent filling and reading the rings

    async def start(self, *, idle=0.0, backpressure=0.0, seed=0):
        """Start the clock, set the pause probabilities and the generators' seeds, and reset (the
        generators load their seeds in reset). Returns on a falling edge, where every later step of
        :meth:`run` also ends, so that Python never writes in the clock's rising edge."""
        dut = self.dut
        cocotb_clock = Clock(dut.clk, self.clock_ns, unit="ns")
        cocotb_clock.start()
        for i, player in enumerate(self.players):
            player.control["idle"].value = probability_threshold(idle)
            player.control["seed"].value = (seed * 7919 + 2 * i + 1) & 0xFFFFFFFF
            player.control["loaded"].value = 0
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
            await Timer(chunk * self.clock_ns, unit="ns")
            self.exchange()

    async def settle(self, clocks):
        """Run ``clocks`` more clocks, then read everything."""
        await Timer(clocks * self.clock_ns, unit="ns")
        self.exchange()
