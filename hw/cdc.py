"""Counting another clock domain's events.

``EventCounter(width, *, i_domain, o_domain="sync")``: ``toggle`` (``i_domain``) flips once per event (the
lowest bit of a counter kept there does); ``count`` (``width`` bits, ``o_domain``) counts the flips. The
toggle crosses through a two-flip-flop synchronizer (``FFSynchronizer``) and each change seen adds one,
so ``count`` trails the events by three clocks of ``o_domain`` and nothing wider than one bit is kept in
``i_domain`` or crosses. Events must be at least three clocks of ``o_domain`` apart: two closer than that
may count as none (never as more than they are).

The board's Ethernet MAC counters (``hw.ethernet.EthernetPort``) are kept in the switch's clock with it:
a frame takes at least 84 clocks of the PHY's 125 MHz (672 ns), against 51 ns a clock of the slowest
switch clock a board builds.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["EventCounter"]


class EventCounter(wiring.Component):
    """``count`` (``width`` bits, ``o_domain``) of the flips of ``toggle`` (``i_domain``): module documentation."""

    def __init__(self, width, *, i_domain, o_domain="sync"):
        if i_domain == o_domain:
            raise ValueError(f"an event counter needs two domains, not {i_domain!r} twice")
        self.i_domain, self.o_domain = i_domain, o_domain
        super().__init__({"toggle": In(1), "count": Out(width)})

    def elaborate(self, platform):
        m = Module()
        seen, before = Signal(name="toggle_seen"), Signal(name="toggle_before")
        m.submodules.sync = FFSynchronizer(self.toggle, seen, o_domain=self.o_domain)
        m.d[self.o_domain] += [before.eq(seen), self.count.eq(self.count + (seen ^ before))]
        return m
