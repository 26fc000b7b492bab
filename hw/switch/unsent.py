"""The RESULTS descriptors of each message that have not left yet (``UnsentResults``).

A message is not released, and a bounded-loss message slot is not reopened or written over, while any of
its RESULTS descriptors (its results, and a bounded-loss message's resends) is queued or being sent: they
read its header store entries and its result entry (docs/ARCHITECTURE.md, "Switch RTL", the release guard).
The monitor counts one in (``queued``: a message's index) when it writes such a descriptor; the emitter
counts one out (``sent``) when it has issued the descriptor's last word; both may come in one clock.

``all_sent[i]`` is ``count[i] == 0``, kept in a register of its own beside the count and set from the count's
comparisons with 0 and 1, in parallel with the strobes, so that a decision that reads it runs through no
comparison of the count; the strobes only choose between the count, one up and one down. ``all_sent_next`` is
what ``all_sent`` holds from the next clock (the strobes applied), for a reader that registers a decision made
of it. ``COUNT_BITS``: a message's descriptors in flight are fewer than the descriptor queue and the emitter
hold, far fewer than 2^8.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UnsentResults", "message_strobe_layout"]


def message_strobe_layout(messages):
    """One of a message's RESULTS descriptors counted in (``queued``) or out (``sent``)."""
    return data.StructLayout({"valid": 1, "message": range(messages)})


class UnsentResults(wiring.Component):
    """``UnsentResults(messages)``. Ports: ``queued`` and ``sent`` (``valid``, ``message``) in; ``all_sent``
    (a bit per message, 1 from reset) and ``all_sent_next`` (its value from the next clock) out."""

    COUNT_BITS = 8

    def __init__(self, messages):
        self.messages = messages
        strobe = message_strobe_layout(messages)
        super().__init__({
            "queued": In(strobe),
            "sent": In(strobe),
            "all_sent": Out(messages, init=(1 << messages) - 1),
            "all_sent_next": Out(messages),
        })

    def elaborate(self, platform):
        m = Module()
        for i in range(self.messages):
            count = Signal(self.COUNT_BITS, name=f"unsent_{i}")
            added = self.queued.valid & (self.queued.message == i)
            subtracted = self.sent.valid & (self.sent.message == i)
            # (the count one up and one down computed beside the strobes, which only choose)
            up = Signal(self.COUNT_BITS, name=f"unsent_up_{i}")
            down = Signal(self.COUNT_BITS, name=f"unsent_down_{i}")
            m.d.comb += [up.eq(count + 1), down.eq(count - 1)]
            m.d.comb += self.all_sent_next[i].eq(self.all_sent[i])
            with m.If(added & ~subtracted):
                m.d.sync += count.eq(up)
                m.d.comb += self.all_sent_next[i].eq(0)
            with m.Elif(subtracted & ~added):
                m.d.sync += count.eq(down)
                m.d.comb += self.all_sent_next[i].eq(count == 1)
        m.d.sync += self.all_sent.eq(self.all_sent_next)
        return m
