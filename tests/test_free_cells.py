"""amaranth.sim unit test of hw/free_cells.py (``FreeCells``): cells taken and given back at random, at every
rate up to one of each a clock. Every take is made only where the cells free at the start of the clock (never
used, or given back in an earlier clock, and not taken since) number at least one, as the egress stage's
admission guarantees; each must then find a cell ``available``, and that cell must be free: no cell is
ever out twice. At the end every cell has been out, and all of them are free again and can be taken."""

import random

import pytest
from amaranth.sim import Simulator

from netreduce.hw.free_cells import FreeCells


def run(cells, take_rate, give_rate, clocks, seed, ready=4):
    rng = random.Random(seed)
    dut = FreeCells(cells, ready=ready)
    free = set(range(cells))        # free at the start of the clock
    out = []                        # taken, not given back
    taken_ever = set()
    takes = 0

    async def bench(ctx):
        nonlocal takes
        for clock in range(clocks):
            given = None
            if out and rng.random() < give_rate:
                given = out.pop(rng.randrange(len(out)))
            take = bool(free) and rng.random() < take_rate
            ctx.set(dut.take, take)
            ctx.set(dut.give, given is not None)
            ctx.set(dut.given, given or 0)
            if take:
                assert ctx.get(dut.available), f"clock {clock}: {len(free)} cells free, none available"
                cell = ctx.get(dut.cell)
                assert cell in free, f"clock {clock}: cell {cell} given out while it is not free"
                free.discard(cell)
                out.append(cell)
                taken_ever.add(cell)
                takes += 1
            await ctx.tick()
            if given is not None:
                free.add(given)         # free from the next clock
        # give every cell back, then take them all, one a clock
        ctx.set(dut.take, 0)
        for cell in out:
            ctx.set(dut.give, 1)
            ctx.set(dut.given, cell)
            await ctx.tick()
            free.add(cell)
        ctx.set(dut.give, 0)
        seen = set()
        for _ in range(cells):
            ctx.set(dut.take, 1)
            assert ctx.get(dut.available)
            seen.add(ctx.get(dut.cell))
            await ctx.tick()
        assert seen == set(range(cells)), "the cells out again are not every cell"
        ctx.set(dut.take, 0)
        await ctx.tick()
        assert not ctx.get(dut.available)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return takes, taken_ever


@pytest.mark.parametrize("cells, take_rate, give_rate", [
    (8, 1.0, 1.0), (8, 0.9, 0.7), (16, 1.0, 0.5), (32, 0.5, 0.5), (5, 1.0, 1.0), (64, 0.95, 0.95),
])
def test_every_take_finds_a_free_cell(cells, take_rate, give_rate):
    takes, taken_ever = run(cells, take_rate, give_rate, 3000, seed=cells * 7 + int(take_rate * 10))
    assert taken_ever == set(range(cells))
    assert takes > 3000 * min(take_rate, give_rate) / 2


def test_a_cell_given_back_is_out_again_the_next_clock():
    """One cell free: given back in one clock, taken in the next, for many clocks in a row."""
    dut = FreeCells(4)

    async def bench(ctx):
        for _ in range(3):                      # the never-used cells but one
            ctx.set(dut.take, 1)
            await ctx.tick()
        kept = [0, 1, 2]
        last = ctx.get(dut.cell)                # cell 3, taken now
        await ctx.tick()
        ctx.set(dut.take, 0)
        out = kept + [last]
        for n in range(40):
            cell = out.pop(0)
            ctx.set(dut.take, 0)
            ctx.set(dut.give, 1)
            ctx.set(dut.given, cell)
            await ctx.tick()
            ctx.set(dut.give, 0)
            ctx.set(dut.take, 1)
            assert ctx.get(dut.available) and ctx.get(dut.cell) == cell, f"round {n}"
            await ctx.tick()
            out.append(cell)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("kwargs, message", [({"cells": 1}, "cells"), ({"cells": 8, "ready": 3}, "ready"),
                                            ({"cells": 8, "ready": 6}, "ready")])
def test_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FreeCells(**kwargs)
