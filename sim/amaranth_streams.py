"""amaranth.sim helpers: drive and collect packet streams with random idle cycles and backpressure.

A frame is ``bytes``; its beats put the first byte in lane 0. ``idle`` is the probability that the source
inserts an idle cycle before a beat, ``backpressure`` the probability that a sink is not ready in a cycle.
"""

import random
from collections import OrderedDict

from amaranth.sim import Simulator

__all__ = ["beats_of", "send_frames", "send_records", "collect_frames", "collect_records", "run",
           "shared_simulator"]

# Simulators kept for reuse in this process (``shared_simulator``), least recently used first.
_SHARED = OrderedDict()
SHARED_SIMULATORS = 12


def shared_simulator(key, build, top=None):
    """``(dut, simulator)`` for the design ``key`` names, with a 100 MHz clock on ``sync``.

    Compiling a design for ``amaranth.sim`` costs a test more than running it (a parser, half a second;
    an adder tree, seconds), and many tests simulate the same design. The first call in this process
    builds ``dut = build()`` and a simulator of ``top(dut)`` (``dut`` itself by default); later calls with
    the same ``key`` hand out the same pair, the simulator reset to what a new one would be: every signal
    and memory at its initial value, time at 0, and none of the earlier runs' testbenches (each is ended
    and taken away; a trigger one still waited on breaks when it fires). ``key`` must name everything
    ``build`` and ``top`` depend on. Add testbenches only (``add_process`` is not undone). Reaches into
    Amaranth 0.5's simulator engine: ``tests/test_amaranth_streams.py`` checks each of these points.
    """
    entry = _SHARED.pop(key, None)
    if entry is None:
        dut = build()
        sim = Simulator(dut if top is None else top(dut))
        sim.add_clock(1e-8)
        entry = (dut, sim)
    else:
        sim = entry[1]
        engine = sim._engine                    # Amaranth 0.5's PySimEngine (tested: test_amaranth_streams.py)
        for testbench in engine._testbenches:   # the earlier runs' testbenches: ended, and taken away
            if testbench.coroutine is not None:
                testbench.coroutine.close()
            testbench.waits_on = None           # a trigger still waited on breaks when it fires
        engine._testbenches.clear()
        sim.reset()                             # every signal and memory to its initial value, time to 0
    _SHARED[key] = entry
    while len(_SHARED) > SHARED_SIMULATORS:
        _SHARED.popitem(last=False)
    return entry


def beats_of(frame, nbytes):
    """``(data, keep, first, last)`` of each beat of ``frame``; an empty frame is one empty beat."""
    chunks = [frame[i:i + nbytes] for i in range(0, len(frame), nbytes)] or [b""]
    return [(int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, k == 0, k == len(chunks) - 1)
            for k, chunk in enumerate(chunks)]


async def _offer(ctx, stream, rng, idle):
    while rng.random() < idle:
        ctx.set(stream.valid, 0)
        await ctx.tick()
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)


def send_frames(stream, frames, nbytes, *, idle=0.0, seed=0, verdicts=None):
    """A testbench process that sends ``frames`` on a frame stream (or on a payload stream, with
    ``verdicts``: one verdict dict per frame, set on its last beat)."""
    async def process(ctx):
        rng = random.Random(seed)
        for index, frame in enumerate(frames):
            for data, keep, first, last in beats_of(frame, nbytes):
                beat = {"data": data, "keep": keep, "first": first, "last": last}
                if verdicts is not None:
                    beat["verdict"] = verdicts[index] if last else {}
                ctx.set(stream.payload, beat)       # one set, one settle of the design
                await _offer(ctx, stream, rng, idle)
        ctx.set(stream.valid, 0)
    return process


def send_records(stream, records, *, idle=0.0, seed=0):
    """A testbench process that sends one payload value (an int or a struct ``Const``) per record."""
    async def process(ctx):
        rng = random.Random(seed)
        for record in records:
            ctx.set(stream.payload, record)
            await _offer(ctx, stream, rng, idle)
        ctx.set(stream.valid, 0)
    return process


def collect_frames(stream, nbytes, out, *, backpressure=0.0, seed=1, extra=None):
    """A background process appending ``(bytes, last_beat_payload)`` per frame to ``out``.

    Bytes past ``keep`` must be zero on the stream; a non-contiguous ``keep`` is an error.
    """
    async def process(ctx):
        rng = random.Random(seed)
        current, beats = bytearray(), 0
        while True:
            ready = rng.random() >= backpressure
            ctx.set(stream.ready, ready)
            if ready and ctx.get(stream.valid):     # the transfer happens at the coming edge
                beat = ctx.get(stream.payload)
                keep = int(beat.keep)
                count = keep.bit_length()
                assert keep == (1 << count) - 1, f"keep {keep:#x} is not contiguous from lane 0"
                assert int(beat.data) >> (8 * count) == 0, "data past keep is not zero"
                assert bool(beat.first) == (beats == 0), "first flag wrong"
                current += int(beat.data).to_bytes(nbytes, "little")[:count]
                beats += 1
                if beat.last:
                    out.append((bytes(current), beat))
                    current, beats = bytearray(), 0
            await ctx.tick()
    return process


def collect_records(stream, out, *, backpressure=0.0, seed=2):
    """A background process appending every payload taken from ``stream`` to ``out``."""
    async def process(ctx):
        rng = random.Random(seed)
        while True:
            ready = rng.random() >= backpressure
            ctx.set(stream.ready, ready)
            if ready and ctx.get(stream.valid):
                out.append(ctx.get(stream.payload))
            await ctx.tick()
    return process


def run(dut, testbenches, backgrounds, *, until_idle, max_cycles=50_000, sim=None):
    """Run the (concurrent) testbenches and background processes until ``until_idle()`` is true; fail
    if that takes more than ``max_cycles``. ``sim``: a simulator of ``dut`` with its clock (from
    ``shared_simulator``) instead of a new one."""
    if sim is None:
        sim = Simulator(dut)
        sim.add_clock(1e-8)
    for bench in testbenches:
        sim.add_testbench(bench)
    for bench in backgrounds:
        sim.add_testbench(bench, background=True)
    async def watch(ctx):
        for _ in range(max_cycles):
            if until_idle():
                return
            await ctx.tick()
        # raised in the simulation, so that it ends even where a testbench still waits on the design
        raise AssertionError(f"the design did not deliver everything within {max_cycles} cycles")
    sim.add_testbench(watch)
    sim.run()
