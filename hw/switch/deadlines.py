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
  registered, and the message still open.
- ``fresh``: ``due`` was computed from the stamp at the head as it is and from the state as it is: the
  head was not taken a clock ago, the monitor wrote no bounded-loss state (``changing``) and no job was
  restarted (``restarting``) a clock ago. The monitor takes a frame while messages are open only when
  ``fresh``, and completes the ``due`` messages first.
- ``expire``: the first due message, in the order of the jobs and, within a job, of its window from its
  ``oldest`` message.
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..ram import RegisterFIFO

__all__ = ["Deadlines"]


class Deadlines(wiring.Component):
    """``Deadlines(*, jobs, message_slots)`` (module documentation)."""

    # frames between the arbiter and the monitor: the arbiter's 32, the match's 5, the parser's (two more in the
    # head's registers)
    DEPTH = 64
    IDLE_MARGIN = 3     # at least the clocks from a first beat's arrival to its stamp at the head (2)

    def __init__(self, *, jobs, message_slots):
        self.jobs_count, self.message_slots = jobs, message_slots
        messages = jobs * message_slots
        self.Expire = data.StructLayout({"found": 1, "job": max(1, ceil_log2(jobs)),
                                         "k": max(1, ceil_log2(message_slots))})
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
        # the subtraction)
        due = Signal(J * K)
        for j in range(J):
            for k in range(K):
                i = j * K + k
                m.d.comb += self.live[i].eq(self.lossy[j] & self.open[i])
                past_head, past_idle = [(frontier - self.opened[i])[:32] >= self.deadline[j]
                                        for frontier in (heads.r_data, idle_frontier)]
                m.d.sync += due[i].eq(self.live[i] & Mux(heads.r_rdy, past_head, past_idle))
        m.d.comb += self.due.eq(due & self.live)
        m.d.sync += self.fresh.eq(heads.r_rdy & ~heads.r_en & ~self.changing & ~self.restarting)

        due_array = Array(self.due[i] for i in range(J * K))
        for j in reversed(range(J)):            # the first of the jobs, then of the job's window, wins
            for position in reversed(range(K)):
                k = Signal(k_bits, name=f"expire_{j}_{position}")
                m.d.comb += k.eq(self.oldest[j][:k_bits] + position)
                with m.If(due_array[j * K + k]):
                    m.d.comb += [self.expire.found.eq(1), self.expire.job.eq(j), self.expire.k.eq(k)]
        return m
