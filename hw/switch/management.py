"""The in-band control plane's agent: each accepted management request applied to the registers, and
answered (``ManagementAgent``).

``ManagementAgent(width, address, ports)``, ``address`` a ``netreduce.wire.ManagementAddress``. The monitor
checks each management frame (from the manager, a whole valid request: docs/ARCHITECTURE.md, "In-band
control plane") and hands its operation to ``request``; the agent takes one at a time:

1. ``SETTLE`` clocks, so that a counter read shows every frame the monitor committed up to and including
   the request itself (a commit's counters land two clocks after it);
2. one clock on the register port ``csr`` (``owns_csr`` high: the switch gives it the port in that clock): a
   write, or the address of a read;
3. ``READ_LATENCY`` clocks later, for a read, the clock in which ``csr.rdata`` shows the word;
4. the reply, a 60-byte frame to the manager (``netreduce.host.management.build_management_frame``: the
   request's fields, the reply bit set, a read's word as its value), on ``o`` at one beat per clock, its
   beats' ``port`` the port the request came in on. Its class is ``CONTROL_DSCP``, the
   egress stage's queue 0. ``sent`` is 1 in the clock its first beat is taken (the switch's ``frames_out``).

Everything but the four fields of the reply is fixed when the switch is built (the addresses, the IPv4
checksum: the UDP checksum is 0), so the frame is those constants with the fields spliced in.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...host.management import ManagementMessage, build_management_frame
from ...registers import READ_LATENCY
from ...wire import CONTROL_DSCP, MANAGEMENT_REPLY, ManagementOp
from ..csr import csr_signature
from ..egress import egress_stream
from ..stream import check_width

__all__ = ["ManagementAgent", "ManagementRequest", "SETTLE"]

SETTLE = 4                  # clocks between taking a request and its register operation
assert READ_LATENCY >= 2 and SETTLE >= READ_LATENCY - 2


def ManagementRequest(ports):
    """An accepted request as the monitor hands it over."""
    return data.StructLayout({"write": 1, "sequence": 16, "address": 16, "value": 32,
                              "port": max(1, ceil_log2(ports))})


_REPLY_FIELDS = {"op": (45, 1), "sequence": (46, 2), "address": (48, 2), "value": (50, 4)}   # byte, bytes


class ManagementAgent(wiring.Component):
    def __init__(self, width, address, ports):
        self.width, self.address, self.ports = check_width(width), address, ports
        self.Request = ManagementRequest(ports)
        template = build_management_frame(ManagementMessage(ManagementOp.READ, 0, 0, 0, reply=True), address)
        self.template = template
        super().__init__({
            "request": In(stream.Signature(self.Request)),
            "csr": Out(csr_signature()),
            "owns_csr": Out(1),
            "o": Out(egress_stream(width)),
            "sent": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        beats = -(-len(self.template) // B)
        taken = Signal(self.Request)
        value = Signal(32)
        settle = Signal(range(SETTLE + 1))
        beat = Signal(range(beats))

        # the reply: the template's bytes, the four fields over them (big-endian)
        octets = [Const(byte, 8) for byte in self.template] + [Const(0, 8)] * (beats * B - len(self.template))
        fields = {"op": Mux(taken.write, MANAGEMENT_REPLY | ManagementOp.WRITE, MANAGEMENT_REPLY | ManagementOp.READ),
                  "sequence": taken.sequence, "address": taken.address, "value": value}
        for name, (at, count) in _REPLY_FIELDS.items():
            field = Value.cast(fields[name])
            for i in range(count):
                octets[at + i] = field[8 * (count - 1 - i):8 * (count - i)]
        frame = Cat(*octets)
        words = Array(frame[i * W:(i + 1) * W] for i in range(beats))
        last_keep = (1 << (len(self.template) - (beats - 1) * B)) - 1

        m.d.comb += [
            self.csr.addr.eq(taken.address), self.csr.wdata.eq(taken.value),
            self.o.payload.data.eq(words[beat]), self.o.payload.first.eq(beat == 0),
            self.o.payload.last.eq(beat == beats - 1),
            self.o.payload.keep.eq(Mux(beat == beats - 1, last_keep, (1 << B) - 1)),
            self.o.payload.dscp.eq(CONTROL_DSCP), self.o.payload.lossy.eq(0), self.o.payload.port.eq(taken.port),
        ]

        with m.FSM(name="agent"):
            with m.State("IDLE"):
                m.d.comb += self.request.ready.eq(1)
                with m.If(self.request.valid):
                    m.d.sync += [taken.eq(self.request.payload), value.eq(self.request.payload.value),
                                 settle.eq(0)]
                    m.next = "SETTLE"
            with m.State("SETTLE"):
                m.d.sync += settle.eq(settle + 1)
                with m.If(settle == SETTLE - 1):
                    m.next = "OPERATE"
            with m.State("OPERATE"):
                m.d.comb += [self.owns_csr.eq(1), self.csr.we.eq(taken.write)]
                m.d.sync += settle.eq(0)
                m.next = "READ_WAIT"
            with m.State("READ_WAIT"):     # the read's word shows READ_LATENCY clocks after OPERATE
                m.d.sync += settle.eq(settle + 1)
                with m.If(settle == READ_LATENCY - 2):
                    m.next = "READ"
            with m.State("READ"):
                with m.If(~taken.write):
                    m.d.sync += value.eq(self.csr.rdata)
                m.d.sync += beat.eq(0)
                m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += self.o.valid.eq(1)
                with m.If(self.o.ready):
                    m.d.comb += self.sent.eq(beat == 0)
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == beats - 1):
                        m.d.sync += beat.eq(0)
                        m.next = "IDLE"
        return m
