"""amaranth.sim unit test of hw/switch/deadlines.py (``Deadlines``) against references written from its rule
(docs/ARCHITECTURE.md, "Bounded-loss class (MLT)", "Time"): every clock, the stamps at the head are the
arrivals in order, ``due`` holds the open messages of the lossy jobs whose deadline is at or before the
frontier of the clock before (the head's arrival, or the clock minus ``IDLE_MARGIN``), ``fresh`` says that
frontier and state are the current ones, and ``expire`` names the due message to complete first.

Two kinds of run:

- *any inputs* (random arrivals, takes, message states, deadlines around the stamps, windows and restarts;
  messages open from before the clock's 0, opened near 2^32, and windows anywhere in the 32-bit message
  space take the differences modulo 2^32; a frontier may come before an opening, which is then not due):
  ``expire`` is the component's rule, each job's first due message in its window from its oldest, and of
  those the one past its deadline the longest at the frontier, the first job on a tie;
- *as the monitor opens them* (a job's messages open in its window's order, each at the frontier of its
  clock, complete in any order, the window moving past completed ones; deadlines different from job to
  job): ``expire`` is the golden model's order, the earliest deadline, then the first job, then the first
  message of the window (``SwitchModel._expire``), which the component's rule equals on such inputs."""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from netreduce.hw.switch.deadlines import Deadlines

MASK = (1 << 32) - 1


class Jobs:
    """The messages of ``jobs`` jobs of ``slots`` message slots as the monitor keeps them: each job's window
    from its oldest message, of which the first ``held`` are held (open or complete), opened in the window's
    order at the frontier of their clock; ``opened`` unbounded (the component takes it modulo 2^32)."""

    def __init__(self, rng, jobs, slots):
        self.rng, self.J, self.K = rng, jobs, slots
        self.oldest = [rng.randrange(1 << 32) for _ in range(jobs)]
        self.held = [0] * jobs
        self.is_open = [0] * (jobs * slots)
        self.opened = [0] * (jobs * slots)

    def slot(self, j, position):
        return j * self.K + (self.oldest[j] + position) % self.K

    def step(self, frontier):
        """One clock's changes: a job opens messages, one completes, a job's window moves past its completed
        oldest messages, or a job restarts."""
        rng, K = self.rng, self.K
        j = rng.randrange(self.J)
        event = rng.random()
        if event < 0.15 and self.held[j] < K:           # a frame opens every message up to its own
            upto = rng.randrange(self.held[j] + 1, K + 1)
            for position in range(self.held[j], upto):
                self.is_open[self.slot(j, position)], self.opened[self.slot(j, position)] = 1, frontier
            self.held[j] = upto
        elif event < 0.3:                               # a message completes (its last contribution)
            open_ones = [i for i in range(j * K, (j + 1) * K) if self.is_open[i]]
            if open_ones:
                self.is_open[rng.choice(open_ones)] = 0
        elif event < 0.4:                               # the oldest messages completed: the window moves on
            while self.held[j] and not self.is_open[self.slot(j, 0)]:
                self.oldest[j] = (self.oldest[j] + 1) & MASK
                self.held[j] -= 1
        elif event < 0.41:                              # the job restarts from another message
            self.oldest[j], self.held[j] = self.rng.randrange(1 << 32), 0
            for i in range(j * K, (j + 1) * K):
                self.is_open[i] = 0


@pytest.mark.parametrize("inputs", ["any", "as the monitor opens them"])
@pytest.mark.parametrize("jobs, message_slots", [(2, 4), (3, 2), (1, 4)])
def test_due_fresh_and_expire_follow_the_rule(jobs, message_slots, inputs):
    rng = random.Random(jobs * 10 + message_slots + 100 * len(inputs))
    J, K, M = jobs, message_slots, jobs * message_slots
    dut = Deadlines(jobs=J, message_slots=K)
    checked = {"due": 0, "expire": 0, "fresh": 0, "expire across jobs": 0 if J > 1 else 1}
    modelled = inputs != "any"

    async def bench(ctx):
        stamps = deque()
        due_reg, overdue_reg, fresh_reg = [0] * M, [0] * M, 0
        lossy = [1] * J
        deadline = [rng.randrange(4, 40) for _ in range(J)]
        deadline_reg = list(deadline)
        jobs_ = Jobs(rng, J, K)
        oldest, opened, is_open = jobs_.oldest, jobs_.opened, jobs_.is_open
        for t in range(3000 if modelled else 1500):
            now = t
            visible = bool(stamps) and stamps[0] + 2 <= now     # (the head is a register: two clocks)
            frontier = stamps[0] if visible else now - Deadlines.IDLE_MARGIN
            # the inputs of this clock
            arrival = rng.random() < 0.3
            take = rng.random() < 0.3
            changing, restarting = rng.random() < 0.1, rng.random() < 0.05
            if rng.random() < 0.05:
                lossy = [int(rng.random() < 0.8) for _ in range(J)]
            if rng.random() < 0.05:     # (in the runs of any inputs, some near the largest, 2^31 - 1)
                deadline = [rng.randrange(4, 40) if modelled or rng.random() < 0.7 else (1 << 31) - rng.randrange(1, 40)
                            for _ in range(J)]
            if modelled:
                jobs_.step(frontier)
            else:
                if rng.random() < 0.05:
                    jobs_.oldest = oldest = [rng.randrange(1 << 32) for _ in range(J)]
                for i in range(M):
                    if rng.random() < 0.1:
                        is_open[i] = int(rng.random() < 0.6)
                        # (within some clocks of its deadline, whatever the deadline)
                        opened[i] = now - (rng.randrange(0, 60) if rng.random() < 0.5
                                           else deadline[i // K] + rng.randrange(-20, 20))
            oldest = jobs_.oldest
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
                ctx.set(dut.opened[i], opened[i] & MASK)

            # what the rule gives in this clock
            live = [lossy[i // K] & is_open[i] for i in range(M)]
            due = [due_reg[i] & live[i] for i in range(M)]

            def distance(i, oldest=oldest):
                return (i % K - oldest[i // K]) % K

            if modelled:        # the golden model's order: the earliest deadline, the first job, the window's
                due_ones = sorted((opened[i] + deadline_reg[i // K], i // K, distance(i), i)
                                  for i in range(M) if due[i])
                expire = (due_ones[0][3] // K, due_ones[0][3] % K) if due_ones else None
            else:               # each job's first due message in its window; of those the longest past its deadline
                firsts = [min((distance(i), i) for i in range(j * K, (j + 1) * K) if due[i])[1]
                          for j in range(J) if any(due[j * K:(j + 1) * K])]
                first = max(firsts, key=lambda i: (overdue_reg[i], -(i // K)), default=None)
                expire = None if first is None else (first // K, first % K)
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
                jobs_due = {i // K for i in range(M) if due[i]}
                if len(jobs_due) > 1 and expire[0] != min(jobs_due):
                    checked["expire across jobs"] += 1      # a later job's message goes first
            checked["due"] += sum(due)
            checked["fresh"] += fresh_reg

            # the edge
            # (past its deadline: how long, modulo 2^32, where that is below 2^31; else the deadline is ahead)
            past = [(frontier - deadline[i // K] - opened[i]) & MASK for i in range(M)]
            due_reg = [live[i] & int(past[i] < 1 << 31) for i in range(M)]
            overdue_reg = past
            deadline_reg = list(deadline)
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
