"""amaranth.sim unit tests of netreduce.hw.framing: bytes into beats, the frame filter, beats into bytes,
and a port's whole path through the GMII MAC and back (hw/mac.py).

Every check compares frames as bytes: what went in, what a beat stream's ``keep`` lanes say came out.
"""

import random

import pytest
from amaranth.hdl import Module, Mux, Signal
from amaranth.sim import Simulator

from netreduce.hw.framing import BeatsToBytes, FrameFilter, MacToBeats
from netreduce.hw.mac import GmiiRx, GmiiTx


def beats_of(frame, width):
    """A frame as (data, keep, last) beats."""
    n = width // 8
    chunks = [frame[i:i + n] for i in range(0, len(frame), n)] or [b""]
    return [(int.from_bytes(c, "little"), (1 << len(c)) - 1, k == len(chunks) - 1) for k, c in enumerate(chunks)]


def bytes_of(beats):
    """Frames (bytes, bad) from (data, keep, last, bad) beats; ``keep`` must be contiguous from lane 0."""
    frames, current = [], bytearray()
    for data, keep, last, bad in beats:
        count = bin(keep).count("1")
        assert keep == (1 << count) - 1, f"keep {keep:#x} is not contiguous"
        current += data.to_bytes(64, "little")[:count]
        if last:
            frames.append((bytes(current), bad))
            current = bytearray()
    assert not current
    return frames


def simulate(dut, testbenches, processes, clocks):
    sim = Simulator(dut)
    sim.add_clock(8e-9)
    for bench in testbenches:
        sim.add_testbench(bench)
    for process in processes:
        sim.add_process(process)
    sim.run_until(8e-9 * clocks)


@pytest.mark.parametrize("width", [64, 512])
def test_mac_to_beats_packs_every_frame(width):
    rng = random.Random(width)
    frames = [(rng.randbytes(rng.choice([0, 1, 7, 8, 9, 63, 64, 65, 200])), rng.random() < 0.3) for _ in range(40)]
    dut = MacToBeats(width)
    got, firsts = [], []

    async def feed(ctx):
        for frame, bad in frames:
            for byte in frame:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": byte, "end": 0, "bad": 0})
                await ctx.tick()
                ctx.set(dut.i.valid, 0)
                if rng.random() < 0.3:
                    await ctx.tick()
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": 0, "end": 1, "bad": bad})
            await ctx.tick()
            ctx.set(dut.i.valid, 0)
            await ctx.tick()

    async def collect(ctx):
        async for _, _, valid, beat in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append((beat.data, beat.keep, beat.last, beat.bad))
                firsts.append(beat.first)

    simulate(dut, [feed], [collect], sum(2 * len(f) + 4 for f, _ in frames) + 20)
    # a frame with no byte at all comes out as one empty beat, and bad
    assert bytes_of(got) == [(frame, int(bad or not frame)) for frame, bad in frames]
    lasts = [last for _, _, last, _ in got]
    assert firsts == [True] + lasts[:-1]


def run_filter(dut, frames, *, ready, clocks, gap=0):
    """Offer ``frames`` ((bytes, bad)) to the filter at one beat a clock (``gap`` idle clocks between
    frames); ``ready(clock)`` drives ``o.ready``. Returns the frames out and the clocks of their beats."""
    taken, clocks_out = [], []

    async def feed(ctx):
        for frame, bad in frames:
            for data, keep, last in beats_of(frame, dut.width):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": data, "keep": keep, "last": last, "bad": bad and last})
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            if gap:
                await ctx.tick().repeat(gap)

    async def drain(ctx):
        clock = 0
        while True:
            ctx.set(dut.o.ready, ready(clock))
            _, _, valid, rdy, beat = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and rdy:
                taken.append((beat.data, beat.keep, beat.last, 0))
                clocks_out.append(clock)
            clock += 1

    simulate(dut, [feed], [drain], clocks)
    return [frame for frame, _ in bytes_of(taken)], clocks_out


def test_filter_passes_good_frames_whole_and_drops_bad_ones():
    rng = random.Random(1)
    frames = [(rng.randbytes(rng.randint(1, 100)), rng.random() < 0.3) for _ in range(60)]
    dut = FrameFilter(64, 64)
    out, _ = run_filter(dut, frames, ready=lambda clock: rng.random() < 0.7, clocks=4000, gap=2)
    assert out == [frame for frame, bad in frames if not bad]


def test_filter_drops_what_does_not_fit_and_keeps_the_rest():
    """``o`` held back: frames are stored while they fit in 16 beats and the one on ``o``; then every
    stored frame leaves, at one beat a clock, and nothing more."""
    frames = [(bytes([n]) * size, False) for n, size in enumerate([40, 48, 17 * 8, 30, 8, 50, 8])]
    dut = FrameFilter(64, 16)
    out, clocks = run_filter(dut, frames, ready=lambda clock: clock >= 400, clocks=800)
    # beats: 5 and 6 stored (11, the first of them on ``o``: 10 in the buffer); 17 do not fit in the 6
    # free; 4 do (14); 1 does (15); 7 do not (the first would be the 16th, the second finds no room);
    # 1 does (16, full)
    assert out == [frames[i][0] for i in (0, 1, 3, 4, 6)]
    assert clocks == list(range(clocks[0], clocks[0] + len(clocks)))        # back to back


def test_bytes_out_of_beats_at_one_a_clock():
    rng = random.Random(2)
    frames = [rng.randbytes(rng.randint(1, 70)) for _ in range(30)]
    dut = BeatsToBytes(64)
    got, clocks = [], []

    async def feed(ctx):
        for frame in frames:
            for index, (data, keep, last) in enumerate(beats_of(frame, 64)):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": data, "keep": keep, "first": index == 0, "last": last})
                await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def drain(ctx):
        clock = 0
        ctx.set(dut.o.ready, 1)
        async for _, _, valid, byte in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append((byte.data, byte.last))
                clocks.append(clock)
            clock += 1

    simulate(dut, [feed], [drain], sum(map(len, frames)) + 50)
    assert bytes(b for b, _ in got) == b"".join(frames)
    assert [i for i, (_, last) in enumerate(got) if last] == [sum(map(len, frames[:k + 1])) - 1
                                                              for k in range(len(frames))]
    assert clocks == list(range(clocks[0], clocks[0] + len(clocks)))        # no gap, between beats or frames


@pytest.mark.parametrize("width", [64, 512])
def test_a_port_through_the_mac_and_back(width):
    """Beats to bytes to GMII (GmiiTx) on the wire into GmiiRx, bytes to beats, the filter: every frame
    arrives whole, padded to 60 bytes; one corrupted on the wire is dropped."""
    rng = random.Random(3)
    frames = [rng.randbytes(n) for n in (14, 60, 64, 99, 300, 1000)]
    top = Module()
    top.submodules.down = down = BeatsToBytes(width)
    top.submodules.tx = tx = GmiiTx()
    top.submodules.rx = rx = GmiiRx(max_frame=1518)
    top.submodules.up = up = MacToBeats(width)
    top.submodules.filter = frame_filter = FrameFilter(width, 2048 // (width // 8))    # 2 KiB
    # the wire, with bit 0 of byte 30 of the fourth frame (after its 8 bytes of preamble and SFD) flipped
    bursts, position, previous = Signal(8), Signal(16), Signal()
    starting = tx.tx_en & ~previous
    burst_now, position_now = bursts + starting, Mux(starting, 0, position)
    top.d.sync += previous.eq(tx.tx_en)
    with top.If(tx.tx_en):
        top.d.sync += [bursts.eq(burst_now), position.eq(position_now + 1)]
    flip = tx.tx_en & (burst_now == 4) & (position_now == 8 + 30)
    top.d.comb += [tx.i.valid.eq(down.o.valid), tx.i.payload.eq(down.o.payload), down.o.ready.eq(tx.i.ready),
                   rx.rx_dv.eq(tx.tx_en), rx.rx_er.eq(tx.tx_er), rx.rxd.eq(tx.txd ^ flip),
                   up.i.valid.eq(rx.o.valid), up.i.payload.eq(rx.o.payload),
                   frame_filter.i.valid.eq(up.o.valid), frame_filter.i.payload.eq(up.o.payload)]
    taken = []

    async def feed(ctx):
        for frame in frames:
            for index_, (data, keep, last) in enumerate(beats_of(frame, width)):
                ctx.set(down.i.valid, 1)
                ctx.set(down.i.payload, {"data": data, "keep": keep, "first": index_ == 0, "last": last})
                await ctx.tick().until(down.i.ready)
        ctx.set(down.i.valid, 0)

    async def drain(ctx):
        ctx.set(frame_filter.o.ready, 1)
        async for _, _, valid, beat in ctx.tick().sample(frame_filter.o.valid, frame_filter.o.payload):
            if valid:
                taken.append((beat.data, beat.keep, beat.last, 0))

    simulate(top, [feed], [drain], sum(max(len(f), 60) + 30 for f in frames) + 100)
    expected = [f + bytes(max(0, 60 - len(f))) for f in frames]
    del expected[3]
    assert [frame for frame, _ in bytes_of(taken)] == expected
