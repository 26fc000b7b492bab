"""The switch's clock, each frame's arrival, and the bounded-loss messages whose deadline has come
(``Deadlines``).

The rule is docs/ARCHITECTURE.md's "Bounded-loss class (MLT)", "Time": a message opens at the arrival of the
frame that opens it (the clock its first beat entered the pipeline), and its deadline fires before every
frame that arrived at or after the opening plus the job's ``deadline_clocks``, so that the RTL completes the
same messages before each frame as the golden model does.

- ``now`` counts clocks. Each ``arrival`` (a frame's first beat taken into the pipeline) is stamped with it
  into a FIFO, whose head is ``head``: the arrival of the next frame the monitor takes (``ready`` when it
  takes it). The FIFO holds a stamp for each frame between the port arbiter and the monitor (``DEPTH``); its
  head is a register (a stamp shows there two clocks after its arrival), so that ``due`` starts from one.
- ``due[i]``, for message ``i = j K + k`` (``open``: busy and not complete, of a job that is ``lossy``): its
  deadline is at or before the *frontier*, the arrival at the head (while no frame is waiting, ``now`` minus
  ``IDLE_MARGIN``, since a frame that went in since then may not have its stamp at the head yet),
  registered, and the message still open. Clocks count modulo 2^32, and a deadline ``D`` is below 2^31: the
  frontier is at or past ``opened + D`` where ``frontier - D - opened`` modulo 2^32 is below 2^31 (a frontier
  up to 2^31 clocks before the opening, or 2^31 or more past the deadline, is not due; a message stays
  open far fewer than 2^31 clocks past its deadline, and opens at the arrival of a frame at or before
  the frontier).
- ``fresh``: ``due`` was computed from the stamp at the head as it is and from the state as it is: the head was not
  taken a clock ago, the monitor wrote none of the state ``due`` is made of (``changing``: a message opened or
  completed) and no job was restarted (``restarting``) a clock ago. The monitor takes a frame while messages are
  open only when ``fresh``, and completes the ``due`` messages first.
- ``expire``: the due message to complete first, in the golden model's order: the earliest deadline, then
  the first job, then the first message of the job's window from its ``oldest``. A job's messages open in
  the order of its window (a frame opens every message up to its own at its arrival, and the monitor takes
  frames in arrival order), so a job's first due message in its window has its earliest deadline: each job's
  first is found, and of those the one that has been due the longest at the frontier (``overdue``,
  registered with ``due``; with one job there is nothing to compare).
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..ram import RegisterFIFO
from ..trees import pairwise

__all__ = ["Deadlines"]


class Deadlines(wiring.Component):
    """``Deadlines(*, jobs, message_slots)`` (module documentation)."""

    # frames between the parser's input (where they are stamped, at the arbiter's output) and the monitor's take
    # (two more in the head's registers): those the parser's buffers hold, most where each is one beat, 6 at 64
    # bits and 28 at 512 behind a stalled monitor (tests/test_switch_monitor.py,
    # ``test_every_frame_in_flight_has_its_arrival_stamp``)
    DEPTH = 64
    IDLE_MARGIN = 3     # at least the clocks from a first beat's arrival to its stamp at the head (2)

    def __init__(self, *, jobs, message_slots):
        self.jobs_count, self.message_slots = jobs, message_slots
        messages = jobs * message_slots
        self.Expire = data.StructLayout({"found": 1, "job": max(1, ceil_log2(jobs)),
                                         "k": max(1, ceil_log2(message_slots))})
        self.Candidate = data.StructLayout({**self.Expire.members, "overdue": 32})
        super().__init__({
            "arrival": In(1),
            "head": Out(stream.Signature(32)),
            "lossy": In(jobs),
            "deadline": In(data.ArrayLayout(32, jobs)),
            "oldest": In(data.ArrayLayout(32, jobs)),
            "open": In(messages),
            "opened": In(data.ArrayLayout(32, messages)),
            "changing": In(1),
            "restarting": In(1),
            "live": Out(messages),
            "due": Out(messages),
            "fresh": Out(1),
            "expire": Out(self.Expire),
        })

    def elaborate(self, platform):
        m = Module()
        J, K = self.jobs_count, self.message_slots
        k_bits = max(1, ceil_log2(K))
        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        # the stamps in distributed RAM (read without a clock), the head in registers behind it (a block
        # RAM's output, 4.3 ns from its clock on the ECP5, would start ``due``'s path)
        m.submodules.arrivals = arrivals = SyncFIFO(width=32, depth=self.DEPTH)
        m.submodules.heads = heads = RegisterFIFO(width=32, depth=2)
        m.d.comb += [arrivals.w_en.eq(self.arrival), arrivals.w_data.eq(now),
                     heads.w_data.eq(arrivals.r_data), heads.w_en.eq(arrivals.r_rdy), arrivals.r_en.eq(heads.w_rdy),
                     self.head.valid.eq(heads.r_rdy), self.head.payload.eq(heads.r_data),
                     heads.r_en.eq(self.head.ready)]

        # (``now - IDLE_MARGIN`` counted beside ``now``, so that no subtraction precedes the frontier's)
        idle_frontier = Signal(32, init=-self.IDLE_MARGIN % (1 << 32))
        m.d.sync += idle_frontier.eq(idle_frontier + 1)
        # (from either frontier side by side, the head's or the idle one, chosen last: no multiplexer ahead of
        # the subtraction). A message is due where the frontier minus its job's deadline (``limit``, one
        # subtraction a job) is at or past its opening: that difference, modulo 2^32, below 2^31 (one subtraction a
        # message, its sign; a deadline is below 2^31 clocks), and it is how long the message has been due
        due = Signal(J * K)
        # how long each message has been due at the frontier (clocks past its deadline), where jobs are compared
        overdue = [Signal(32, name=f"overdue_{i}") for i in range(J * K)] if J > 1 else None
        for j in range(J):
            limits = [Signal(32, name=f"limit_{name}_{j}") for name in ("head", "idle")]
            m.d.comb += [limit.eq(frontier - self.deadline[j])
                         for limit, frontier in zip(limits, (heads.r_data, idle_frontier), strict=True)]
            for k in range(K):
                i = j * K + k
                m.d.comb += self.live[i].eq(self.lossy[j] & self.open[i])
                past = [(limit - self.opened[i])[:32] for limit in limits]
                past_head, past_idle = [~clocks[31] for clocks in past]
                m.d.sync += due[i].eq(self.live[i] & Mux(heads.r_rdy, past_head, past_idle))
                if overdue:
                    m.d.sync += overdue[i].eq(Mux(heads.r_rdy, past[0], past[1]))
        m.d.comb += self.due.eq(due & self.live)
        m.d.sync += self.fresh.eq(heads.r_rdy & ~heads.r_en & ~self.changing & ~self.restarting)

        # each job's first due message in its window from its oldest
        due_array = Array(self.due[i] for i in range(J * K))
        firsts = []
        for j in range(J):
            # (with one job, its first due message is the one)
            first = self.expire if J == 1 else Signal(self.Candidate, name=f"first_due_{j}")
            for position in reversed(range(K)):
                k = Signal(k_bits, name=f"expire_{j}_{position}")
                m.d.comb += k.eq(self.oldest[j][:k_bits] + position)
                with m.If(due_array[j * K + k]):
                    m.d.comb += [first.found.eq(1), first.job.eq(j), first.k.eq(k)]
            if overdue:
                m.d.comb += first.overdue.eq(Array(overdue[j * K:(j + 1) * K])[first.k])
            firsts.append(first)
        # of those, the one due the longest (the earliest deadline), the first job where two are alike: pairs in
        # the jobs' order, the earlier job's winning ties
        def earlier(a, b):
            winner = Signal(self.Candidate, name="earliest")
            m.d.comb += winner.eq(Mux(b.found & (~a.found | (b.overdue > a.overdue)), b, a))
            return winner
        earliest = pairwise(firsts, earlier)
        if earliest is not self.expire:
            m.d.comb += [self.expire.found.eq(earliest.found), self.expire.job.eq(earliest.job),
                         self.expire.k.eq(earliest.k)]
        return m
