"""amaranth.sim unit tests of tb/harness.py: the player plays what its ring holds, in order, gated and
paused as asked, and stamps every frame; the recorder keeps every beat with its clock, refuses only when
full or paused, and counts pauses inside frames. An ideal model (a Python list) runs beside each."""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from netreduce.hw.stream import axi_stream_signature
from netreduce.tb.harness import (
    FrameGate,
    Harness,
    PauseGenerator,
    Player,
    Recorder,
    beat_layout,
    probability_threshold,
)
from netreduce.wire import line_bytes

LAYOUT = beat_layout(64)


def beats_of(frame):
    chunks = [frame[i:i + 8] for i in range(0, len(frame), 8)] or [b""]
    return [LAYOUT.const({"data": int.from_bytes(c, "little"), "keep": (1 << len(c)) - 1,
                          "last": k == len(chunks) - 1}).as_value().value for k, c in enumerate(chunks)]


def run_player(frames, *, gates=None, idle=0.0, ready_probability=1.0, depth=8, frame_depth=4, lanes=2,
               seed=3, line_rate=0):
    """Play ``frames`` through a small ring of words of ``lanes`` beats, refilling it as a driver would;
    returns the frames taken (bytes), the clock of each taken beat, the stamps, and the clocks in which a
    beat was offered."""
    dut = Player(LAYOUT, depth=depth, frames=frame_depth, lanes=lanes)
    cycle = Signal(32)
    m = Module()
    m.submodules.dut = dut
    m.d.sync += cycle.eq(cycle + 1)
    m.d.comb += dut.cycle.eq(cycle)
    gates = gates or [(0, 0)] * len(frames)
    taken, beat_clocks, stamps, offered = [], [], [], []

    async def bench(ctx):
        ctx.set(dut.idle, probability_threshold(idle))
        ctx.set(dut.seed, seed)
        ctx.set(dut.line_rate, line_rate)
        rng = random.Random(seed)
        pending = [(beats_of(f), g) for f, g in zip(frames, gates, strict=True)]
        ring = [0] * depth                     # what the ring holds, beat by beat
        loaded = loaded_frames = stamped = 0
        current = b""
        for clock in range(4000):
            played, done = ctx.get(dut.played), ctx.get(dut.taken)
            while stamped < done:
                stamps.append(ctx.get(dut.stamps.data[stamped % frame_depth]))
                stamped += 1
            while pending and loaded + len(pending[0][0]) - played <= depth and loaded_frames - stamped < frame_depth:
                beats, (after_out, after_in) = pending.pop(0)
                for beat in beats:
                    ring[loaded % depth] = beat
                    word = (loaded % depth) // lanes
                    ctx.set(dut.beats.data[word], [LAYOUT.from_bits(b) for b in ring[word * lanes:(word + 1) * lanes]])
                    loaded += 1
                ctx.set(dut.gates.data[loaded_frames % frame_depth],
                        FrameGate.const({"after_out": after_out, "after_in": after_in,
                                         "line_bits": 8 * line_bytes(len(frames[loaded_frames]))}))
                loaded_frames += 1
            ctx.set(dut.loaded, loaded)
            ctx.set(dut.frames_out, clock // 50)         # frames "out": one every 50 clocks
            ctx.set(dut.frames_in, done)
            ready = rng.random() < ready_probability
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid):
                offered.append(clock)
                if ready:
                    payload = ctx.get(dut.o.payload)
                    beat_clocks.append(ctx.get(cycle))
                    current += int(payload.data).to_bytes(8, "little")[:bin(int(payload.keep)).count("1")]
                    if payload.last:
                        taken.append(current)
                        current = b""
            await ctx.tick()
            if not pending and len(taken) == len(frames) and stamped == len(frames):
                return
        raise AssertionError("the player did not finish")

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return taken, beat_clocks, stamps, offered


def frames_of(count, seed=0):
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 8, 9, 16, 60, 61]))) for _ in range(count)]


def test_player_plays_in_order_through_a_small_ring_and_stamps_each_frame():
    frames = frames_of(12)
    taken, beat_clocks, stamps, _ = run_player(frames, ready_probability=0.7)
    assert taken == frames
    assert len(stamps) == len(frames)
    ends = [i for i, f in enumerate(frames) for _ in range(len(beats_of(f)))]
    for index, stamp in enumerate(stamps):
        clocks = [c for c, f in zip(beat_clocks, ends, strict=True) if f == index]
        assert (stamp.first, stamp.last) == (clocks[0], clocks[-1])
    assert sum(stamp.refused for stamp in stamps) > 0


def test_player_at_one_beat_per_clock_without_pauses():
    frames = frames_of(6, seed=1)
    _, beat_clocks, stamps, _ = run_player(frames, depth=64)
    assert beat_clocks == list(range(beat_clocks[0], beat_clocks[0] + len(beat_clocks)))
    assert all(stamp.refused == 0 for stamp in stamps)


def test_player_gates_wait_for_frames_out_and_in():
    frames = frames_of(4, seed=2)
    gates = [(0, 0), (2, 0), (2, 2), (3, 3)]       # frames out come one every 50 clocks
    _, _, stamps, _ = run_player(frames, gates=gates, depth=64)
    assert stamps[1].first >= 100 and stamps[3].first >= 150
    assert stamps[2].first > stamps[1].last


def test_player_idle_pauses_at_about_their_probability_and_never_withdraw_a_beat():
    frames = frames_of(30, seed=4)
    taken, beat_clocks, _, offered = run_player(frames, idle=0.5, depth=64)
    assert taken == frames
    span = beat_clocks[-1] - beat_clocks[0] + 1
    assert 1.6 < span / len(beat_clocks) < 2.5       # about one clock in two offered


def test_player_paces_frames_as_a_line_delivers_them():
    """A line of 48 bits a clock, slower than the player's 64-bit beats: each frame starts once the line has
    carried every frame before it (its bytes, FCS, preamble and gap: ``line_bytes``), to the clock, the
    fractions carried over; a frame's beats go back to back; the line is never ahead by a clock's bits."""
    frames, rate = frames_of(12, seed=6), 48
    _, beat_clocks, stamps, _ = run_player(frames, line_rate=rate, depth=64)
    line = [8 * line_bytes(len(f)) for f in frames]
    for n, stamp in enumerate(stamps):
        assert stamp.first - stamps[0].first == -(-sum(line[:n]) // rate)
        assert stamp.last - stamp.first == len(beats_of(frames[n])) - 1
        assert stamp.line_ahead == rate * (stamp.first - stamps[0].first) - sum(line[:n]) < rate
    assert len(beat_clocks) == sum(len(beats_of(f)) for f in frames)


def test_a_line_runs_on_while_frames_wait_and_not_while_none_does():
    """A device slower than the line: the frames wait, and each one's ``line_ahead`` is how far the line had
    got past its start (the backlog a MAC's buffer would hold). A frame held by its gate (nothing waits before
    it) starts with the line never more than a clock's bits ahead: an idle line brings nothing."""
    frames, rate = frames_of(10, seed=7), 200
    _, _, stamps, _ = run_player(frames, line_rate=rate, ready_probability=0.3, depth=64)
    line = [8 * line_bytes(len(f)) for f in frames]
    for n, stamp in enumerate(stamps):
        assert stamp.line_ahead == rate * (stamp.first - stamps[0].first) - sum(line[:n])
    assert stamps[-1].line_ahead > sum(line) // 2     # the slow device: the line got far ahead
    gates = [(0, 0), (3, 0), (3, 0)]                   # frames out come one every 50 clocks
    _, _, stamps, _ = run_player(frames[:3], gates=gates, line_rate=rate, depth=64)
    assert stamps[1].first >= 150 and stamps[1].line_ahead < rate


@pytest.mark.parametrize("probability, low, high", [(0.0, 0, 0), (0.25, 0.2, 0.3), (1.0, 1, 1)])
def test_pause_generator_rate(probability, low, high):
    dut = PauseGenerator()
    count = []

    async def bench(ctx):
        ctx.set(dut.threshold, probability_threshold(probability))
        ctx.set(dut.seed, 12345)
        total = 0
        for _ in range(2000):
            total += ctx.get(dut.pause)
            await ctx.tick()
        count.append(total / 2000)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert low <= count[0] <= high


def test_recorder_keeps_every_beat_with_its_clock_and_refuses_only_when_full():
    dut = Recorder(LAYOUT, depth=8, lanes=2)
    cycle = Signal(32)
    m = Module()
    m.submodules.dut = dut
    m.d.sync += cycle.eq(cycle + 1)
    m.d.comb += dut.cycle.eq(cycle)
    frames = frames_of(10, seed=5)
    sent, got, refused_when_room = [], [], []

    async def bench(ctx):
        rng = random.Random(5)
        beats = [(b, i) for i, f in enumerate(frames) for b in beats_of(f)]
        consumed = 0
        index = 0
        gap_inside = 0
        inside = False
        while len(got) < len(beats):
            recorded = ctx.get(dut.recorded)
            if rng.random() < 0.3:                      # the driver reads in batches, now and then
                while consumed < recorded:
                    got.append(ctx.get(dut.entries.data[consumed % 8 // 2])[consumed % 2])
                    consumed += 1
                ctx.set(dut.consumed, consumed)
            offer = index < len(beats) and rng.random() < 0.8
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, LAYOUT.from_bits(beats[index][0]))
            elif inside:
                gap_inside += 1
            await ctx.delay(1e-9)
            if offer and ctx.get(dut.i.ready):
                sent.append((beats[index][0], ctx.get(cycle)))
                inside = not LAYOUT.from_bits(beats[index][0]).last
                index += 1
            elif offer and recorded - consumed < 8:
                refused_when_room.append(recorded)
            await ctx.tick()
        assert ctx.get(dut.frames) == len(frames)
        assert ctx.get(dut.pauses) == gap_inside

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert [(int(e.beat.as_value().value), int(e.cycle)) for e in got] == sent
    assert not refused_when_room


class Loopback(wiring.Component):
    """A device with one AXI-Stream port in and one out, joined (a register stage would do as well)."""

    def __init__(self):
        super().__init__({"s_axis": In(axi_stream_signature(64)), "m_axis": Out(axi_stream_signature(64))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.m_axis.tdata.eq(self.s_axis.tdata), self.m_axis.tkeep.eq(self.s_axis.tkeep),
                     self.m_axis.tlast.eq(self.s_axis.tlast), self.m_axis.tvalid.eq(self.s_axis.tvalid),
                     self.s_axis.tready.eq(self.m_axis.tready)]
        return m


def test_harness_plays_into_the_device_and_records_its_output_or_bypasses_both():
    dut = Harness(Loopback(), inputs=["s_axis"], outputs=["m_axis"], play_depth=64, play_frames=4,
                  record_depth=64)
    assert dut.description()["players"] == [{"kind": "axis", "width": 64, "user": 0}]
    frames = frames_of(3, seed=6)
    player, recorder = dut.players[0], dut.recorders[0]

    async def bench(ctx):
        beats = [b for f in frames for b in beats_of(f)]
        padded = beats + [0] * (-len(beats) % dut.lanes)
        for w in range(len(padded) // dut.lanes):
            ctx.set(player.beats.data[w], [LAYOUT.from_bits(b) for b in padded[w * dut.lanes:(w + 1) * dut.lanes]])
        ctx.set(dut.play[0].loaded, len(beats))
        await ctx.tick().repeat(len(beats) + 4)
        assert ctx.get(dut.record[0].recorded) == len(beats)
        assert ctx.get(dut.record[0].frames) == len(frames) == ctx.get(dut.play[0].taken)
        got = [ctx.get(recorder.entries.data[k // dut.lanes])[k % dut.lanes].beat.as_value().value
               for k in range(len(beats))]
        assert got == beats
        # bypassed: the top's own ports reach the device, the recorder sees nothing
        ctx.set(dut.bypass, 1)
        ctx.set(dut.s_axis.tvalid, 1)
        ctx.set(dut.s_axis.tdata, 0x1234)
        ctx.set(dut.m_axis.tready, 1)
        assert ctx.get(dut.m_axis.tvalid) == 1 and ctx.get(dut.m_axis.tdata) == 0x1234
        assert ctx.get(dut.s_axis.tready) == 1
        await ctx.tick()
        assert ctx.get(dut.record[0].recorded) == len(beats)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
