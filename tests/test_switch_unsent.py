"""amaranth.sim unit test of hw/switch/unsent.py (``UnsentResults``): under random descriptors queued and sent
for random messages (both in one clock too, for one message and for two), every message's ``all_sent`` is,
in every clock, whether a count kept beside it in Python is 0: from reset, and up to counts well above 1; and
``all_sent_next``, once the clock's strobes are set, what ``all_sent`` is after the clock."""

import random

import pytest
from amaranth.sim import Simulator

from netreduce.hw.switch.unsent import UnsentResults


@pytest.mark.parametrize("messages", [1, 6])
def test_all_sent_is_the_count_at_zero(messages):
    rng = random.Random(messages)
    dut = UnsentResults(messages)
    seen = set()

    async def bench(ctx):
        counts = [0] * messages
        for _ in range(3000):
            assert ctx.get(dut.all_sent) == sum((count == 0) << i for i, count in enumerate(counts)), counts
            seen.update(counts)
            queued = rng.random() < 0.45
            queued_at = rng.randrange(messages)
            busy = [i for i in range(messages) if counts[i]]
            sent = bool(busy) and rng.random() < 0.45        # only what was queued is sent
            sent_at = rng.choice(busy) if busy else 0
            ctx.set(dut.queued.valid, queued)
            ctx.set(dut.queued.message, queued_at)
            ctx.set(dut.sent.valid, sent)
            ctx.set(dut.sent.message, sent_at)
            after = list(counts)
            after[queued_at] += queued
            after[sent_at] -= sent
            assert ctx.get(dut.all_sent_next) == sum((count == 0) << i for i, count in enumerate(after)), after
            await ctx.tick()
            counts = after

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert {0, 1, 2, 3} <= seen
