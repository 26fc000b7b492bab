"""amaranth.sim unit tests of netreduce.hw.ports: the frame arbiter and the frame router.

Frames are lists of beat words with random lengths; sources offer them with random idle clocks, sinks
take them with random backpressure. The arbiter must deliver every frame of every port whole (never two
frames interleaved), each port's frames in order, serve the ports round robin when all are busy, and
pass one beat per clock; the router must deliver each frame whole to the port its first beat named.
"""

import random

import pytest
from amaranth.hdl import Cat, Module
from amaranth.sim import Simulator

from netreduce.hw.egress import EgressBeat
from netreduce.hw.ports import FRAME_PORTS_DEPTH, FrameArbiter, FrameRouter
from netreduce.sim.amaranth_streams import shared_simulator

WIDTH = 64


def random_frames(rng, count, tag):
    """Frames as lists of 64-bit words; the tag in the top byte says where a frame came from."""
    return [[(tag << 56) | (n << 32) | rng.getrandbits(32) for _ in range(rng.randint(1, 6))]
            for n in range(count)]


def budget(*frame_lists, wait=0):
    """Clocks enough for every beat of ``frame_lists`` at the random idle and backpressure of these tests
    (eight clocks a beat, and ``wait`` more): a test that runs out of them fails on its missing frames."""
    return wait + 1000 + 8 * sum(len(frame) for frames in frame_lists for frame in frames)


def arbiter(ports):
    """A ``FrameArbiter(WIDTH, ports)`` and its simulator, shared by the tests of this process."""
    return shared_simulator(("FrameArbiter", WIDTH, ports), lambda: FrameArbiter(WIDTH, ports))


def run(dut, testbenches, clocks, sim=None):
    if sim is None:
        sim = Simulator(dut)
        sim.add_clock(1e-8)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    sim.run_until(clocks * 1e-8)


def source(stream, frames, rng, idle, fields=None):
    """Offers ``frames`` with random idle clocks; ``fields(n)``: more payload fields of frame n's beats."""
    async def testbench(ctx):
        for n, frame in enumerate(frames):
            for index, word in enumerate(frame):
                while rng.random() < idle:
                    ctx.set(stream.valid, 0)
                    await ctx.tick()
                ctx.set(stream.valid, 1)
                ctx.set(stream.payload, {"data": word, "keep": 0xFF, "first": index == 0,
                                         "last": index == len(frame) - 1, **(fields(n) if fields else {})})
                await ctx.tick().until(stream.ready)
        ctx.set(stream.valid, 0)
    return testbench


def sink(stream, rng, backpressure, taken, extra=None):
    """Collects beats as (data, last, extra value) while taking them with random backpressure."""
    async def testbench(ctx):
        while True:
            ready = rng.random() >= backpressure
            ctx.set(stream.ready, ready)
            _, _, valid, data, last, value = await ctx.tick().sample(
                stream.valid, stream.payload.data, stream.payload.last, extra if extra is not None else stream.valid)
            if ready and valid:
                taken.append((data, last, value))
    return testbench


def frames_of(beats):
    frames, current = [], []
    for data, last, _ in beats:
        current.append(data)
        if last:
            frames.append(current)
            current = []
    assert not current, "a frame was left unfinished"
    return frames


def drain_frame_ports(dut):
    """A reader that takes every frame's port as it comes."""
    async def bench(ctx):
        ctx.set(dut.frame_port.ready, 1)
    return bench


@pytest.mark.parametrize("ports", [1, 2, 3, 4])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.0), (0.2, 0.4)])
def test_arbiter_whole_frames_in_order(ports, idle, backpressure):
    rng = random.Random(ports * 100 + int(10 * idle))
    dut, sim = arbiter(ports)
    offered = [random_frames(rng, 30, p) for p in range(ports)]
    taken = []
    run(dut, [source(dut.i[p], offered[p], random.Random(rng.random()), idle) for p in range(ports)]
        + [sink(dut.o, random.Random(rng.random()), backpressure, taken, dut.port), drain_frame_ports(dut)],
        budget(*offered), sim)
    frames = frames_of(taken)
    assert sorted(map(tuple, frames)) == sorted(tuple(f) for port in offered for f in port)
    for p in range(ports):
        assert [f for f in frames if f[0] >> 56 == p] == offered[p]          # each port in order
    for data, _, port in taken:
        assert data >> 56 == port                                              # port names the source


@pytest.mark.parametrize("ports", [1, 3])
def test_arbiter_notes_each_frames_port_in_order(ports):
    """``frame_port`` gives one entry per frame, its port, in the order of the frames on ``o``; read
    slowly (as headers come), it holds them, and a frame waits to start while it is full."""
    rng = random.Random(11 + ports)
    dut, sim = arbiter(ports)
    offered = [random_frames(rng, 3 * FRAME_PORTS_DEPTH, p) for p in range(ports)]
    taken, noted = [], []

    async def read_ports(ctx):
        ctx.set(dut.frame_port.ready, 0)
        for _ in range(40 * FRAME_PORTS_DEPTH):     # fill it first: the frames must wait
            await ctx.tick()
        async for _, _, valid, ready, payload in ctx.tick().sample(dut.frame_port.valid, dut.frame_port.ready,
                                                                    dut.frame_port.payload):
            if valid and ready:
                noted.append(payload)
            ctx.set(dut.frame_port.ready, rng.random() < 0.5)

    run(dut, [source(dut.i[p], offered[p], random.Random(rng.random()), 0.1) for p in range(ports)]
        + [sink(dut.o, random.Random(rng.random()), 0.1, taken), read_ports],
        budget(*offered, wait=40 * FRAME_PORTS_DEPTH), sim)
    frames = frames_of(taken)
    assert len(frames) == ports * 3 * FRAME_PORTS_DEPTH
    if ports > 1:
        assert noted == [f[0] >> 56 for f in frames]
    else:
        assert set(noted) == {0}


def test_arbiter_round_robin_and_line_rate():
    """All ports always valid: frames alternate between the ports, one beat per clock."""
    rng = random.Random(7)
    dut, sim = arbiter(3)
    offered = [random_frames(rng, 20, p) for p in range(3)]
    taken, clocks = [], []

    async def count(ctx):
        cycle = 0
        async for _, _, valid, ready in ctx.tick().sample(dut.o.valid, dut.o.ready):
            cycle += 1
            if valid and ready:
                clocks.append(cycle)

    run(dut, [source(dut.i[p], offered[p], rng, 0.0) for p in range(3)]
        + [sink(dut.o, rng, 0.0, taken), count, drain_frame_ports(dut)], clocks=2000, sim=sim)
    frames = frames_of(taken)
    assert [f[0] >> 56 for f in frames] == [n % 3 for n in range(60)]
    assert clocks[-1] - clocks[0] + 1 == len(clocks)                          # no bubble


@pytest.mark.parametrize("ports", [1, 2, 4])
def test_router_whole_frames_to_their_port(ports):
    rng = random.Random(ports)
    dut = FrameRouter(WIDTH, ports)
    route_and_check(dut, ports, rng)


def test_router_carries_every_field_of_its_beat_layout():
    """With the egress stage's beat, each beat leaves with the class fields it came with."""
    dut = FrameRouter(WIDTH, 3, beat=EgressBeat(WIDTH))
    route_and_check(dut, 3, random.Random(7), classes=True)


def route_and_check(dut, ports, rng, classes=False):
    # the destination port rides in the top byte of every beat (only the first beat's counts); the
    # parent decodes it combinationally, as the switch decodes the destination MAC
    top = Module()
    top.submodules.router = dut
    top.d.comb += dut.destination.eq(dut.i.payload.data[56:])
    frames = [[(rng.randrange(ports) << 56) | (w & ((1 << 56) - 1)) for w in f] for f in random_frames(rng, 80, 0)]
    for frame in frames:                # later beats name other ports: the frame must not follow them
        for i in range(1, len(frame)):
            frame[i] = ((frame[0] >> 56) + i) % ports << 56 | (frame[i] & ((1 << 56) - 1))
    taken = [[] for _ in range(ports)]
    fields = (lambda n: {"dscp": n % 64, "lossy": n % 3 == 0}) if classes else None
    extra = (lambda p: Cat(dut.o[p].payload.dscp, dut.o[p].payload.lossy)) if classes else (lambda p: None)
    run(top, [source(dut.i, frames, rng, 0.2, fields)]
        + [sink(dut.o[p], random.Random(p), 0.3, taken[p], extra(p)) for p in range(ports)], budget(frames))
    for p in range(ports):
        assert frames_of(taken[p]) == [f for f in frames if f[0] >> 56 == p]
        if classes:         # the frame's number is in bits 32.. of each of its words
            assert all(value == ((data >> 32 & 0xFFFFFF) % 64 | ((data >> 32 & 0xFFFFFF) % 3 == 0) << 6)
                       for data, _, value in taken[p])
    assert sum(map(len, taken)) == sum(map(len, frames))


@pytest.mark.parametrize(("stamps", "order"), [
    ([5, 3, 3, 9], [1, 2, 0, 3]),                               # oldest first, ties to the lower port
    ([0xFFFE, 2, 0x0001, 0xFFF0], [3, 0, 2, 1]),                # the stamps wrap around
    ([0x0000, 0x6000, 0xC000], [0, 1, 2]),          # half the range apart: none oldest, the lowest port
    ([0x6001, 0x0000, 0x6000, 0xC000], [0, 1, 2, 3]),           # so too once the oldest has gone
])
def test_stamped_arbiter_takes_the_oldest_whole_frame_first(stamps, order):
    """With ``stamp_bits`` (ports that hold whole frames), frames waiting at every port at once are taken
    oldest first by their stamps (16 bits, modulo), ties to the lower port; where the stamps lie more than
    half their range apart so that no frame is older than all the others (each port's older than the
    next's, the last's than the first's), the lowest port's."""
    ports = len(stamps)
    dut, sim = shared_simulator(("FrameArbiter", WIDTH, ports, "stamped"),
                                lambda: FrameArbiter(WIDTH, ports, stamp_bits=16))
    frames = [[(p << 56) | beat for beat in range(3)] for p in range(ports)]
    taken = []

    async def offer(ctx):
        for p in range(ports):
            ctx.set(dut.stamp[p], stamps[p])
        for p in range(ports):
            ctx.set(dut.i[p].payload, {"data": frames[p][0], "keep": 0xFF, "first": 1, "last": 0})
            ctx.set(dut.i[p].valid, 1)
        beat = [0] * ports
        while len(taken) < 3 * ports:
            ctx.set(dut.o.ready, 1)
            _, _, port, valid = await ctx.tick().sample(dut.port, dut.o.valid)
            if valid:
                beat[port] += 1
                if beat[port] == 3:
                    ctx.set(dut.i[port].valid, 0)
                else:
                    ctx.set(dut.i[port].payload, {"data": frames[port][beat[port]], "keep": 0xFF, "first": 0,
                                                  "last": beat[port] == 2})
                taken.append(port)

    run(dut, [offer], 200, sim=sim)
    assert taken == [p for p in order for _ in range(3)]


@pytest.mark.parametrize("seed", range(6))
def test_stamped_arbiter_order_is_oldest_first_for_any_stamps_within_half_the_range(seed):
    """Random stamps within half the 16-bit range of each other (around a random point, so that they may
    wrap), 2 to 4 ports: the order taken is the module docstring's, by age, ties to the lower port."""
    rng = random.Random(seed)
    ports = rng.randint(2, 4)
    base = rng.randrange(1 << 16)
    offsets = [rng.choice([0, 1, rng.randrange(1 << 15)]) for _ in range(ports)]
    stamps = [(base + offset) % (1 << 16) for offset in offsets]
    order = sorted(range(ports), key=lambda p: (offsets[p], p))
    test_stamped_arbiter_takes_the_oldest_whole_frame_first(stamps, order)
