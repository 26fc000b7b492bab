"""amaranth.sim unit test of hw/switch/deadlines.py (``Deadlines``) against a reference written from its rule
(docs/ARCHITECTURE.md, "Bounded-loss class (MLT)", "Time"): every clock, with random arrivals, takes,
message states, deadlines around the stamps, windows and restarts, the stamps at the head are the arrivals
in order, ``due`` holds the open messages of the lossy jobs whose deadline is at or before the frontier of
the clock before (the head's arrival, or the clock minus ``IDLE_MARGIN``), ``fresh`` says that frontier
and state are the current ones, and ``expire`` names the first due message by job, then by window from
the job's oldest message. Messages open from before the clock's 0 (opened near 2^32) and windows anywhere in
the 32-bit message space take the differences modulo 2^32."""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from netreduce.hw.switch.deadlines import Deadlines

MASK = (1 << 32) - 1


@pytest.mark.parametrize("jobs, message_slots", [(2, 4), (3, 2)])
def test_due_fresh_and_expire_follow_the_rule(jobs, message_slots):
    rng = random.Random(jobs * 10 + message_slots)
    J, K, M = jobs, message_slots, jobs * message_slots
    dut = Deadlines(jobs=J, message_slots=K)
    checked = {"due": 0, "expire": 0, "fresh": 0}

    async def bench(ctx):
        stamps = deque()
        due_reg, fresh_reg = [0] * M, 0
        lossy = [1] * J
        deadline = [rng.randrange(4, 40) for _ in range(J)]
        oldest = [rng.randrange(1 << 32) for _ in range(J)]
        opened = [0] * M
        is_open = [0] * M
        for t in range(1500):
            now = t
            # the inputs of this clock
            arrival = rng.random() < 0.3
            take = rng.random() < 0.3
            changing, restarting = rng.random() < 0.1, rng.random() < 0.05
            if rng.random() < 0.05:
                lossy = [int(rng.random() < 0.8) for _ in range(J)]
            if rng.random() < 0.05:
                deadline = [rng.randrange(4, 40) for _ in range(J)]
            if rng.random() < 0.05:
                oldest = [rng.randrange(1 << 32) for _ in range(J)]
            for i in range(M):
                if rng.random() < 0.1:
                    is_open[i] = int(rng.random() < 0.6)
                    opened[i] = (now - rng.randrange(0, 60)) & MASK
            ctx.set(dut.arrival, arrival)
            ctx.set(dut.head.ready, take)
            ctx.set(dut.changing, changing)
            ctx.set(dut.restarting, restarting)
            ctx.set(dut.lossy, sum(bit << j for j, bit in enumerate(lossy)))
            for j in range(J):
                ctx.set(dut.deadline[j], deadline[j])
                ctx.set(dut.oldest[j], oldest[j])
            ctx.set(dut.open, sum(bit << i for i, bit in enumerate(is_open)))
            for i in range(M):
                ctx.set(dut.opened[i], opened[i])

            # what the rule gives in this clock
            live = [lossy[i // K] & is_open[i] for i in range(M)]
            due = [due_reg[i] & live[i] for i in range(M)]
            expire = None
            for j in range(J):
                for position in range(K):
                    k = (oldest[j] + position) % K
                    if expire is None and due[j * K + k]:
                        expire = (j, k)
            # (a stamp shows at the head two clocks after its arrival: the head is a register)
            visible = bool(stamps) and stamps[0] + 2 <= now
            assert ctx.get(dut.head.valid) == visible
            if visible:
                assert ctx.get(dut.head.payload) == stamps[0], "the head is not the next arrival"
            assert ctx.get(dut.live) == sum(bit << i for i, bit in enumerate(live))
            assert ctx.get(dut.due) == sum(bit << i for i, bit in enumerate(due)), f"due at clock {t}"
            assert ctx.get(dut.fresh) == fresh_reg
            got = ctx.get(dut.expire)
            assert bool(got.found) == (expire is not None)
            if expire is not None:
                assert (got.job, got.k) == expire, f"expire at clock {t}"
                checked["expire"] += 1
            checked["due"] += sum(due)
            checked["fresh"] += fresh_reg

            # the edge
            frontier = stamps[0] if visible else (now - Deadlines.IDLE_MARGIN) & MASK
            due_reg = [live[i] & int(((frontier - opened[i]) & MASK) >= deadline[i // K]) for i in range(M)]
            fresh_reg = int(visible and not take and not changing and not restarting)
            if take and visible:
                stamps.popleft()
            if arrival:
                stamps.append(now)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert all(checked.values()), f"some outputs were never exercised: {checked}"
