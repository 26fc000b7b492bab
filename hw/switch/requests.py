"""The requests that control and management packets carry, read from a frame's first bytes
(``RequestDecoder``).

The monitor keeps the first ``WINDOW_BYTES`` of every frame (the whole of these short frames: Ethernet, an
802.1Q tag or none, IPv4 without options, UDP, 12 bytes of payload). A control packet's payload
(``netreduce.wire.CONTROL_PACKET``, after 42 bytes, or 46 with a tag) is a request when it is whole (the
frame and the UDP length hold its 12 bytes: Ethernet padding is never read as a field), its magic and
version are right and its type is CREDIT_REQUEST or RESULT_REQUEST (``control``). A management packet's
(``netreduce.wire.MANAGEMENT_PACKET``, after 42 bytes: the manager's frames are untagged) is a request when
it is whole, its magic and version are right and its op is a WRITE or a READ without the reply bit
(``management``). The host library builds and parses the same packets (``netreduce.host.protocol``,
``netreduce.host.management``). Combinational; which frames are control or management frames at all is
the connection match's (``match.ConnectionMatch``).
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...wire import (
    CONTROL_MAGIC,
    CONTROL_VERSION,
    MANAGEMENT_MAGIC,
    MANAGEMENT_VERSION,
    ControlType,
    ManagementOp,
)

__all__ = ["RequestDecoder", "WINDOW_BYTES", "ControlRequest", "ManagementRequestFields"]

WINDOW_BYTES = 64           # bytes of each frame the monitor keeps
_UDP_PAYLOAD = 42           # Ethernet (14), IPv4 without options (20), UDP (8)
_REQUEST_BYTES = 12         # CONTROL_PACKET and MANAGEMENT_PACKET

ControlRequest = data.StructLayout({"ok": 1, "results": 1, "job": 16, "worker": 8, "value": 32})
ManagementRequestFields = data.StructLayout({"ok": 1, "write": 1, "sequence": 16, "address": 16, "value": 32})


def big_endian(window, offset, count):
    """The big-endian field of ``count`` bytes at byte ``offset`` of ``window`` (byte ``i`` in bits 8i..8i+7)."""
    return Cat(*[window[8 * (offset + count - 1 - i):][:8] for i in range(count)])


class RequestDecoder(wiring.Component):
    """Ports: ``window`` (the frame's first ``WINDOW_BYTES``, byte ``i`` in bits ``8i..8i+7``), ``kept`` (how
    many bytes of the frame there are), ``tagged`` (it has an 802.1Q tag), ``udp_length`` (its UDP length
    field) in; ``control``, ``management`` out (module documentation)."""

    window: In(8 * WINDOW_BYTES)
    kept: In(16)
    tagged: In(1)
    udp_length: In(16)
    control: Out(ControlRequest)
    management: Out(ManagementRequestFields)

    def elaborate(self, platform):
        m = Module()
        whole_udp = self.udp_length >= 8 + _REQUEST_BYTES
        for tagged in (0, 1):
            at = _UDP_PAYLOAD + 4 * tagged

            def field(offset, count, at=at):
                return big_endian(self.window, at + offset, count)
            kind = field(3, 1)
            with m.If(self.tagged == tagged):
                m.d.comb += [
                    self.control.ok.eq((self.kept >= at + _REQUEST_BYTES) & whole_udp
                                       & (field(0, 2) == CONTROL_MAGIC) & (field(2, 1) == CONTROL_VERSION)
                                       & ((kind == ControlType.CREDIT_REQUEST) | (kind == ControlType.RESULT_REQUEST))),
                    self.control.results.eq(kind == ControlType.RESULT_REQUEST),
                    self.control.job.eq(field(4, 2)),
                    self.control.worker.eq(field(6, 1)),
                    self.control.value.eq(field(8, 4)),
                ]

        def field(offset, count):
            return big_endian(self.window, _UDP_PAYLOAD + offset, count)
        op = field(3, 1)
        m.d.comb += [
            self.management.ok.eq((self.kept >= _UDP_PAYLOAD + _REQUEST_BYTES) & whole_udp
                                  & (field(0, 2) == MANAGEMENT_MAGIC) & (field(2, 1) == MANAGEMENT_VERSION)
                                  & ((op == ManagementOp.WRITE) | (op == ManagementOp.READ))),
            self.management.write.eq(op == ManagementOp.WRITE),
            self.management.sequence.eq(field(4, 2)),
            self.management.address.eq(field(6, 2)),
            self.management.value.eq(field(8, 4)),
        ]
        return m
