"""The port each frame leaves by (``ForwardingTable``).

The rule of docs/ARCHITECTURE.md ("Configuration", the forwarding table): a frame leaves by the port of the
first valid entry of the table whose MAC is the frame's destination MAC and whose port the build has;
otherwise by the default port, or port 0 if the build lacks that one. The golden model reads the same
registers so (``sim.switch_model.config_from_registers``).

The table is asked once per frame, on the path of the frame's class (``hw.egress.FrameClass``) from the
emitter to the class queue, and never on the path of the frame's beats: the emitter hands over each frame's
class with the destination MAC of the header record it builds, and the answer goes into the class's ``port``,
which ``hw.egress.ClassJoin`` puts on every beat of the frame for the router. The lookup is two registered
stages: every entry compared with the MAC at once (``hits``), then the first hit's port chosen (the lowest hit
isolated by a carry chain, its port an OR of masked ports). Each stage takes a class a clock.
"""

import operator
from functools import reduce

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..egress import FrameClass
from ..ports import check_ports
from .registers import ForwardingEntry

__all__ = ["ForwardingTable", "FrameDestination"]

# a frame's class as the emitter hands it over, ``port`` not yet known, with the frame's destination MAC
FrameDestination = data.StructLayout({"frame_class": FrameClass, "eth_dst": 48})


class ForwardingTable(wiring.Component):
    """``ForwardingTable(*, ports, entries)``. Ports: ``i`` (each frame's class with its destination MAC) in,
    ``o`` (the class with its ``port``) out, in order, two clocks later when ``o`` is ready; ``entries`` and
    ``default_port``: the configuration (``SwitchRegisters.forwarding``, ``switch.default_port``)."""

    def __init__(self, *, ports, entries):
        self.ports, self.entries_count = check_ports(ports), entries
        super().__init__({
            "i": In(stream.Signature(FrameDestination)),
            "o": Out(stream.Signature(FrameClass)),
            "entries": In(data.ArrayLayout(ForwardingEntry, entries)),
            "default_port": In(8),
        })

    def elaborate(self, platform):
        m = Module()
        P, E = self.ports, self.entries_count
        compared = Signal(data.StructLayout({"valid": 1, "frame_class": FrameClass, "hits": E}))
        chosen = Signal(data.StructLayout({"valid": 1, "frame_class": FrameClass}))
        take_chosen = ~chosen.valid | self.o.ready
        take_compared = ~compared.valid | take_chosen
        m.d.comb += [self.i.ready.eq(take_compared), self.o.valid.eq(chosen.valid),
                     self.o.payload.eq(chosen.frame_class)]

        # stage 1: every entry against the MAC
        with m.If(take_compared):
            m.d.sync += [
                compared.valid.eq(self.i.valid), compared.frame_class.eq(self.i.payload.frame_class),
                compared.hits.eq(Cat(*[entry.valid & (entry.mac == self.i.payload.eth_dst) & (entry.port < P)
                                       for entry in self.entries])),
            ]

        # stage 2: the first hit's port, or the default
        hits = compared.hits
        first = Signal(E)
        m.d.comb += first.eq(hits & (~hits + 1)[:E])
        port_bits = len(chosen.frame_class.port)
        hit_port = reduce(operator.or_, [Mux(first[e], self.entries[e].port[:port_bits], 0) for e in range(E)])
        default = Mux(self.default_port < P, self.default_port[:port_bits], 0)
        with m.If(take_chosen):
            m.d.sync += [chosen.valid.eq(compared.valid), chosen.frame_class.eq(compared.frame_class),
                         chosen.frame_class.port.eq(Mux(hits.any(), hit_port, default))]
        return m
