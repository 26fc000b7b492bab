"""amaranth.sim unit tests of hw/gearbox.py: ``WidenBeats``, ``WholeFrames`` and ``NarrowBeats``.

Frames of every length from 1 byte to several core beats go through with random idle clocks in and
backpressure out, and come out byte for byte (``collect_frames`` checks that ``keep`` is contiguous, the
bytes past it zero and ``first`` on each frame's first beat). The timing each component promises is checked
clock by clock: a port beat a clock through ``WidenBeats`` and ``NarrowBeats`` when nothing waits, no frame
out of ``WholeFrames`` before its last beat is in and none pausing once it has started, and a frame longer
than the buffer cut short to the buffer's worth, its beats taken at once, rather than stalled."""

import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from netreduce.hw.gearbox import NarrowBeats, WholeFrames, WidenBeats, check_port_width
from netreduce.sim.amaranth_streams import collect_frames, run, send_frames, shared_simulator


def frames_of(lengths, seed):
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(n)) for n in lengths]


LENGTHS = [1, 7, 8, 9, 60, 63, 64, 65, 127, 128, 129, 200, 1, 1, 8, 64, 333]


@pytest.mark.parametrize(("narrow", "wide"), [(64, 512), (64, 128), (128, 512), (64, 64)])
@pytest.mark.parametrize(("idle", "backpressure"), [(0.0, 0.0), (0.3, 0.4)])
def test_widened_beats_carry_the_frames_byte_for_byte(narrow, wide, idle, backpressure):
    dut, sim = shared_simulator(("widen", narrow, wide), lambda: WidenBeats(narrow, wide))
    frames, out = frames_of(LENGTHS, 1), []
    clocks = []

    async def count(ctx):
        while True:
            await ctx.tick()
            clocks.append(1)
    run(dut, [send_frames(dut.i, frames, narrow // 8, idle=idle)],
        [collect_frames(dut.o, wide // 8, out, backpressure=backpressure), count],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == frames
    if not idle and not backpressure:       # a port beat every clock
        port_beats = sum(max(1, -(-len(f) // (narrow // 8))) for f in frames)
        assert len(clocks) <= port_beats + 3


@pytest.mark.parametrize(("wide", "narrow"), [(512, 64), (128, 64), (512, 128), (64, 64)])
@pytest.mark.parametrize(("idle", "backpressure"), [(0.0, 0.0), (0.3, 0.4)])
def test_narrowed_beats_carry_the_frames_byte_for_byte(wide, narrow, idle, backpressure):
    dut, sim = shared_simulator(("narrow", wide, narrow), lambda: NarrowBeats(wide, narrow))
    frames, out = frames_of(LENGTHS, 2), []
    gaps = []

    async def watch_gaps(ctx):
        """With nothing waiting, no clock inside a frame without a port beat."""
        inside = False
        while True:
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if inside and not valid:
                gaps.append(1)
            if valid:
                inside = not payload.last
    run(dut, [send_frames(dut.i, frames, wide // 8, idle=idle)],
        [collect_frames(dut.o, narrow // 8, out, backpressure=backpressure), watch_gaps],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == frames
    if not idle and not backpressure:
        assert not gaps


@pytest.mark.parametrize(("idle", "backpressure"), [(0.0, 0.0), (0.5, 0.0), (0.2, 0.5)])
def test_whole_frames_leave_only_once_in_and_never_pause(idle, backpressure):
    width, depth = 64, 64
    dut, sim = shared_simulator(("whole", width, depth), lambda: WholeFrames(width, depth))
    frames, out = frames_of(LENGTHS, 3), []
    events = []         # ("in_last", clock) and ("out_first", clock) per frame, and pauses

    async def watch(ctx):
        clock, inside = 0, False
        while True:
            _, _, i_valid, i_ready, i_beat, o_valid, o_ready, o_beat = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload, dut.o.valid, dut.o.ready, dut.o.payload)
            if i_valid and i_ready and i_beat.last:
                events.append(("in_last", clock))
            if inside and not o_valid:
                events.append(("pause", clock))
            if o_valid and o_ready:
                if o_beat.first:
                    events.append(("out_first", clock))
                inside = not o_beat.last
            clock += 1
    run(dut, [send_frames(dut.i, frames, width // 8, idle=idle)],
        [collect_frames(dut.o, width // 8, out, backpressure=backpressure), watch],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == frames
    assert not [e for e in events if e[0] == "pause"]
    ins = [clock for kind, clock in events if kind == "in_last"]
    outs = [clock for kind, clock in events if kind == "out_first"]
    assert all(o > i for i, o in zip(ins, outs, strict=True))


@pytest.mark.parametrize("depth", [2, 3, 8])
@pytest.mark.parametrize("backpressure", [0.0, 0.3])
def test_a_frame_longer_than_the_buffer_is_cut_short_and_the_port_never_stalls(depth, backpressure):
    """A frame longer than the buffer leaves as the buffer's worth of it, its last beat marked, ``truncated``
    high for one clock each; the rest of it is taken a beat a clock from the clock it is cut (the port is
    never held for it); the frames around it, one of exactly the buffer and 1-beat ones right behind a cut
    one among them, go through byte for byte."""
    width = 64
    dut, sim = shared_simulator(("whole", width, depth), lambda: WholeFrames(width, depth))
    size = 8 * depth
    lengths = [size * 5, 30, size + 1, 1, size, size * 3 + 5, size * 3 + 5, 2, size + 8, 7]
    frames, out = frames_of(lengths, 4), []
    expected = [frame[:size] for frame in frames]
    cuts, held = [], []

    async def watch(ctx):
        discarding = False      # inside a frame cut short: each of its beats must be taken at once
        while True:
            _, _, truncated, i_valid, i_ready, i_beat = await ctx.tick().sample(dut.truncated, dut.i.valid,
                                                                                dut.i.ready, dut.i.payload)
            cuts.extend([1] if truncated else [])
            if (discarding or truncated) and i_valid and not i_ready:
                held.append(1)
            discarding = (discarding or truncated) and not (i_valid and i_ready and i_beat.last)
    run(dut, [send_frames(dut.i, frames, width // 8)],
        [collect_frames(dut.o, width // 8, out, backpressure=backpressure), watch],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == expected
    assert len(cuts) == sum(len(frame) > size for frame in frames) >= 5
    assert not held


class _Chain(Elaboratable):
    """A port's way in and out of a core of ``wide`` bits."""

    def __init__(self, narrow, wide):
        self.widen, self.whole = WidenBeats(narrow, wide), WholeFrames(wide, 64)
        self.narrow_ = NarrowBeats(wide, narrow)
        self.i, self.o = self.widen.i, self.narrow_.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.widen, m.submodules.whole, m.submodules.narrow = self.widen, self.whole, self.narrow_
        wiring.connect(m, self.widen.o, self.whole.i)
        wiring.connect(m, self.whole.o, self.narrow_.i)
        return m


def test_a_port_in_and_out_of_a_wider_core_keeps_every_frame():
    chain, sim = shared_simulator(("chain", 64, 512), lambda: _Chain(64, 512))
    frames, out = frames_of(LENGTHS * 2, 5), []
    run(chain, [send_frames(chain.i, frames, 8, idle=0.2)], [collect_frames(chain.o, 8, out, backpressure=0.3)],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == frames


def test_port_widths_are_checked():
    assert check_port_width(64, 512) == 8 and check_port_width(512, 1024) == 2
    for narrow, wide in ((512, 64), (96, 512), (64, 2048)):
        with pytest.raises(ValueError):
            check_port_width(narrow, wide)


def test_whole_frames_are_stamped_with_the_clock_they_were_whole():
    """With ``stamp_bits``: as each frame leaves, ``head_stamp`` is ``now`` of the clock its last beat went in,
    or for a frame cut short (longer than the buffer) of the clock it was cut; the stamps after it stay with
    their frames."""
    width, depth = 64, 64
    dut, sim = shared_simulator(("whole", width, depth, "stamped"), lambda: WholeFrames(width, depth, stamp_bits=16))
    frames, out = frames_of(LENGTHS[:8] + [8 * depth + 100] + LENGTHS[8:], 6), []
    completed, seen = [], []

    async def clock(ctx):
        now, discarding = 0, False
        while True:
            ctx.set(dut.now, now % (1 << 16))
            _, _, valid, ready, beat, o_valid, o_ready, o_beat, stamp, truncated = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload, dut.o.valid, dut.o.ready, dut.o.payload, dut.head_stamp,
                dut.truncated)
            ends = valid and ready and beat.last
            if truncated:                       # stamped as it is cut; the rest of it comes to nothing
                completed.append(now)
                discarding = not ends
            elif ends:
                if not discarding:
                    completed.append(now)
                discarding = False
            if o_valid and o_ready and o_beat.first:
                seen.append(stamp)
            now += 1
    run(dut, [send_frames(dut.i, frames, width // 8, idle=0.3)],
        [collect_frames(dut.o, width // 8, out, backpressure=0.5), clock],
        until_idle=lambda: len(out) == len(frames), sim=sim)
    assert [frame for frame, _ in out] == [frame[:8 * depth] for frame in frames]
    assert seen == completed, (seen, completed)
