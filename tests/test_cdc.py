"""amaranth.sim unit test of hw/cdc.py (``CounterCrossing``): a count that grows at random in one clock domain,
wrapping, read in another clock domain faster or slower than it: every value read is one the count held, in
the order it held them (never a value it skipped, never going back), and once the count stops the value read
is the count within four clocks of the reading domain. The Gray code itself round-trips every 10-bit value."""

import random

import pytest
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.sim import Simulator

from netreduce.hw.cdc import CounterCrossing, gray_decode, gray_encode

WIDTH = 6       # wraps many times in a run


@pytest.mark.parametrize("source_ns, reader_ns", [(8.0, 51.0), (37.0, 10.0)])
def test_reads_are_values_the_count_held_in_order(source_ns, reader_ns):
    rng = random.Random(int(source_ns))
    top = Module()
    top.domains.src = ClockDomain("src")
    top.submodules.dut = dut = CounterCrossing(WIDTH, i_domain="src")
    count = Signal(WIDTH)
    step = Signal()
    top.d.src += count.eq(count + step)
    top.d.comb += dut.i.eq(count)
    held = [0]          # every value of the count, in order
    reads = []          # (value read, how many values the count had held by then)
    steps = 600
    lag = 2 + int(4 * reader_ns / source_ns)        # the most steps a read may trail the count by

    async def source(ctx):
        for _ in range(steps):
            go = rng.random() < 0.7
            ctx.set(step, go)
            await ctx.tick("src")
            if go:
                held.append((held[-1] + 1) % (1 << WIDTH))
        ctx.set(step, 0)

    async def reader(ctx):
        async for _, _, value in ctx.tick("sync").sample(dut.o):
            reads.append((value, len(held)))

    sim = Simulator(top)
    sim.add_clock(source_ns * 1e-9, domain="src")
    sim.add_clock(reader_ns * 1e-9, domain="sync", phase=reader_ns * 0.37e-9)
    sim.add_testbench(source)
    sim.add_process(reader)
    sim.run_until((steps * source_ns + 40 * reader_ns) * 1e-9)

    at = 0
    for n, (value, now) in enumerate(reads):
        window = range(max(at, now - 1 - lag), now)     # not behind the read before, not ahead of the count
        found = [k for k in window if held[k] == value]
        assert found, f"read {n} ({value}) is no value the count held in steps {window.start}..{window.stop - 1}"
        at = found[0]
    wraps = sum(b < a for (a, _), (b, _) in zip(reads, reads[1:], strict=False))
    assert wraps >= 3, "the reads did not follow the count round"
    assert [value for value, _ in reads[-4:]] == [held[-1]] * 4, "the count stopped, the reads did not settle on it"


def test_gray_code_round_trips():
    width = 10
    value, code, back = Signal(width), Signal(width), Signal(width)
    top = Module()
    top.d.comb += [code.eq(gray_encode(value)), back.eq(gray_decode(code))]

    async def bench(ctx):
        before = None
        for v in range(1 << width):
            ctx.set(value, v)
            assert ctx.get(back) == v
            c = ctx.get(code)
            if before is not None:
                assert bin(c ^ before).count("1") == 1, f"{v - 1} -> {v} changes more than one bit of the code"
            before = c
        assert bin(before ^ 0).count("1") == 1, "the wrap changes more than one bit of the code"

    sim = Simulator(top)
    sim.add_testbench(bench)
    sim.run()
