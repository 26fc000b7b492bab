"""A counter seen from another clock domain.

``CounterCrossing(width, *, i_domain, o_domain="sync")``: ``i``, a binary count in ``i_domain`` that grows
by at most one a clock (it may wrap), is shown as ``o`` in ``o_domain``. The count is Gray-coded in a
register of ``i_domain`` (one bit changes per step), crosses through a two-flip-flop synchronizer per bit
(``FFSynchronizer``), and is decoded back to binary in a register of ``o_domain``. So every value ``o``
takes is one that ``i`` held, ``o`` never goes back, and it trails ``i`` by three clocks of ``o_domain``
and one of ``i_domain`` (at most one step of ``i`` can be in flight per bit: a sample taken while a bit
changes reads that bit old or new, and either is a value ``i`` held).

The board's Ethernet MAC counters (``hw.ethernet.EthernetPort``) cross from the PHY's clocks into the
switch's with it, for the register map's ``ethernet`` block.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["CounterCrossing", "gray_encode", "gray_decode"]


def gray_encode(value):
    """The Gray code of ``value`` (a ``Value`` or an ``int``)."""
    return value ^ (value >> 1)


def gray_decode(code):
    """The binary value of Gray code ``code`` (a ``Value``): bit ``i`` is the XOR of the code's bits from ``i`` up."""
    bits = [code[-1]]
    for i in reversed(range(len(code) - 1)):
        bits.insert(0, bits[0] ^ code[i])
    return Cat(*bits)


class CounterCrossing(wiring.Component):
    """``i`` (``width`` bits, ``i_domain``) shown as ``o`` in ``o_domain`` (module documentation)."""

    def __init__(self, width, *, i_domain, o_domain="sync"):
        if i_domain == o_domain:
            raise ValueError(f"a counter crossing needs two domains, not {i_domain!r} twice")
        self.i_domain, self.o_domain = i_domain, o_domain
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        width = len(self.i)
        code = Signal(width, name="gray")
        m.d[self.i_domain] += code.eq(gray_encode(self.i))
        crossed = Signal(width, name="gray_crossed")
        m.submodules.sync = FFSynchronizer(code, crossed, o_domain=self.o_domain)
        m.d[self.o_domain] += self.o.eq(gray_decode(crossed))
        return m
