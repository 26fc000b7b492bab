"""The port each frame leaves by (``ForwardingTable``).

The rule of docs/ARCHITECTURE.md ("Configuration", the forwarding table): a frame leaves by the port of the
first valid entry of the table whose MAC is the frame's destination MAC (its first six bytes) and whose port
the build has; otherwise by the default port, or port 0 if the build lacks that one. The golden model reads
the same registers so (``sim.switch_model.config_from_registers``). Combinational: the router asks with the
first beat of each frame and keeps the answer for the frame's other beats.
"""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..ports import check_ports
from ..stream import check_width
from .registers import ForwardingEntry

__all__ = ["ForwardingTable"]


class ForwardingTable(wiring.Component):
    """``ForwardingTable(*, width, ports, entries)``. Ports: ``beat`` (the data of a frame's first beat, the
    first byte on the wire in lane 0), ``port`` (the port it leaves by); ``entries`` and ``default_port``:
    the configuration (``SwitchRegisters.forwarding``, ``switch.default_port``)."""

    def __init__(self, *, width, ports, entries):
        check_width(width)
        self.width, self.ports, self.entries_count = width, check_ports(ports), entries
        super().__init__({
            "beat": In(width),
            "port": Out(range(self.ports)),
            "entries": In(data.ArrayLayout(ForwardingEntry, entries)),
            "default_port": In(8),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        destination = Cat(*[self.beat[8 * i:8 * i + 8] for i in reversed(range(6))])     # network byte order
        m.d.comb += self.port.eq(Mux(self.default_port < P, self.default_port, 0))
        for e in reversed(range(self.entries_count)):       # the first entry that matches wins
            entry = self.entries[e]
            with m.If(entry.valid & (entry.mac == destination) & (entry.port < P)):
                m.d.comb += self.port.eq(entry.port)
        return m
