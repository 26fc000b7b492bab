"""amaranth.sim unit test of hw/cdc.py (``EventCounter``): events in one clock domain, each flipping a toggle,
at random times at least four reading clocks apart, counted in another domain faster or slower than theirs:
the count never runs ahead of the events, trails them by at most four reading clocks, and ends equal to
them, across the count's wrap."""

import random

import pytest
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.sim import Simulator

from netreduce.hw.cdc import EventCounter

WIDTH = 5       # wraps several times in a run


@pytest.mark.parametrize("source_ns, reader_ns", [(8.0, 51.0), (37.0, 10.0)])
def test_counts_every_event_a_few_clocks_late(source_ns, reader_ns):
    rng = random.Random(int(source_ns))
    top = Module()
    top.domains.src = ClockDomain("src")
    top.submodules.dut = dut = EventCounter(WIDTH, i_domain="src")
    toggle, flip = Signal(), Signal()
    top.d.src += toggle.eq(toggle ^ flip)
    top.d.comb += dut.toggle.eq(toggle)
    gap = int(4 * reader_ns / source_ns) + 1           # source clocks between events, at least
    events = [0]        # events so far, by the source's clock
    reads = []          # (count read, events by then)
    total = 150

    async def source(ctx):
        for _ in range(total):
            await ctx.tick("src").repeat(gap + rng.randrange(3 * gap))
            ctx.set(flip, 1)
            await ctx.tick("src")
            ctx.set(flip, 0)
            events.append(events[-1] + 1)

    async def reader(ctx):
        async for _, _, value in ctx.tick("sync").sample(dut.count):
            reads.append((value, events[-1]))

    sim = Simulator(top)
    sim.add_clock(source_ns * 1e-9, domain="src")
    sim.add_clock(reader_ns * 1e-9, domain="sync", phase=reader_ns * 0.37e-9)
    sim.add_testbench(source)
    sim.add_process(reader)
    sim.run_until(total * 4 * gap * source_ns * 1e-9 + 40 * reader_ns * 1e-9)

    assert events[-1] == total
    late = 0
    for n, (value, happened) in enumerate(reads):
        behind = (happened - value) % (1 << WIDTH)
        assert behind <= 1, f"read {n}: {value} with {happened} events ({behind} behind, or ahead)"
        late = late + 1 if behind else 0
        assert late <= 4, f"read {n}: the count trails an event by more than four clocks"
    assert reads[-1][0] == total % (1 << WIDTH)


def test_refuses_one_domain():
    with pytest.raises(ValueError, match="two domains"):
        EventCounter(8, i_domain="sync")
