"""Each frame's connection and binding, from its header and the port it came in on (``ConnectionMatch``).

The rules are those of docs/ARCHITECTURE.md, "Switch behaviour, per received frame" (rules 2 to 5) and
"Trust model", for the part that needs configuration only, never state, so that the match runs as the
headers arrive, ahead of the monitor:

- ``spoofed``: the frame's source MAC is the switch's (or its management MAC), or it is IPv4 from the
  switch's address (or its management address) (rule 2);
  or its key is registered (an ACK's ACK key, any other RoCE frame's data key) but it is not *bound* to
  that connection: it did not arrive on that side's port (not compared for the data frames of a
  bounded-loss job, which MLT sprays over every port), from its MAC, in its VLAN, or is not addressed to
  the other side's MAC and IPv4 address (rule 5);
- ``control``: IPv4 UDP, not RoCE, to the control port and the switch's address (rule 3); ``stray``: the
  same to any other address (dropped: control traffic flows only between the switch and hosts);
- ``ack``, ``data``: a bound ACK, a bound frame of the data key, with ``conn`` its connection (c = j N + w);
- ``management``: IPv4 UDP, not RoCE, to the management port of the management address fixed at build time
  (``management``, a ``netreduce.wire.ManagementAddress``), from the manager (its MAC, IPv4 address and UDP
  port, untagged, and on its port if the address names one); ``refused``: the same to the management
  address from anyone else (dropped and counted);
- none of these: unregistered traffic, forwarded;
- ``from_requester``, ``from_responder`` (a bit per connection, for every frame): the frame comes from the
  connection's requester as bound (its IPv4 address, MAC, VLAN and port, the port not compared for a
  bounded-loss job), from its responder (IPv4 address, MAC and VLAN). The monitor checks a control request's
  sender with them, once it has read which connection the request names from its payload, so that no
  connection's address reaches the monitor.

A key is registered when its connection and the connection's job are enabled. The comparisons with
every connection are registered (a stage of their own, off the path that picks the connection), and
``o`` carries each header's ``MonitoredHeader`` (the fields the monitor decides on; the whole record waits
in ``records.HeaderRecords``) with its match through a FIFO of two entries in registers (``hw.ram.RegisterFIFO``);
where no frame is one beat (``header_clocks`` above 1) the FIFO is one register of the match alone, and the
header stays in the comparisons' register until its match is taken.

The comparisons take the clocks that the headers leave them. Where a header comes every ``header_clocks``
clocks at most (a frame of ``header_clocks`` beats at least: 8 at 64 bits), the connections are compared in
*steps*, ``lanes`` of them a clock (``lanes = ceil(C / header_clocks)``), so that the header is compared with
each connection in the ``ceil(C / lanes)`` clocks it waits at the head of the parser's FIFO anyway, and the
comparisons' bits of each step are kept until the last. Each lane reads the fields of its connections
(c = step lanes + lane) from a ``ConnectionTable`` of its own, written from the register port's connection
writes (``connection_write``), at the step (read a clock ahead, ``read_ahead``, so that the comparisons start
at registers): one comparator per lane and field instead of one per connection,
and no connection's fields reaching the match from the registers (on the board switch, the header's fields
fanned out to every connection's comparators and the configuration's wires were router2's most congested).
Where a header can come every clock (512 bits), there is one step, and each lane's table holds one
connection.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...registers import CONNECTION
from ...wire import MANAGEMENT_PORT, PARSED_HEADER_FIELDS
from ..csr import block_write_layout
from ..ram import RegisterFIFO
from ..stream import ParsedHeader
from .connection_table import ConnectionTable
from .registers import JobEntry, SwitchAddress, vlan_of

__all__ = ["ConnectionMatch", "match_layout", "MonitoredHeader", "monitored"]

_ACKNOWLEDGE = 0x11


def match_layout(connections, ports):
    return data.StructLayout({"conn": max(1, ceil_log2(connections)), "ack": 1, "data": 1, "control": 1,
                              "spoofed": 1, "stray": 1, "management": 1, "refused": 1,
                              "port": max(1, ceil_log2(ports)), "from_requester": connections,
                              "from_responder": connections})


# Of each header record, what the match hands on with its match: the fields the monitor decides on. The
# record itself waits in ``records.HeaderRecords`` for the monitor's fate.
MONITORED_FIELDS = ("roce", "vlan_valid", "ip_version", "udp_len", "bth_opcode", "bth_pad", "bth_psn",
                    "aeth_syndrome", "payload_len")
MonitoredHeader = data.StructLayout({name: bits for name, bits in PARSED_HEADER_FIELDS if name in MONITORED_FIELDS})
assert len(MonitoredHeader.members) == len(MONITORED_FIELDS)


def monitored(header):
    """The ``MonitoredHeader`` value of a ``ParsedHeader`` view."""
    return Cat(*[getattr(header, name) for name in MonitoredHeader.members])


# the registers of the connection block that the comparisons read
COMPARED_REGISTERS = tuple(f"{side}_{name}" for side in ("requester", "responder")
                           for name in ("mac", "ip", "qpn", "port", "vlan")) + ("enable",)


class ConnectionMatch(wiring.Component):
    """``ConnectionMatch(*, jobs, workers, ports, management=None, header_clocks=1)``. Ports: ``header``
    (the parser's header records) and ``port`` (the ingress port of each frame, in the same order) in; ``o``
    (``header``, a ``MonitoredHeader``, and ``match``) out; ``switch``, ``jobs``: the configuration, and
    ``connection_write``, the register port's writes to the connection block (``SwitchRegisters``).
    ``header_clocks``: the fewest clocks from one header to the next (a frame's fewest beats). With 1 (512
    bits) a header can follow a header in the next clock and the queue holds two (one a clock through); else
    it holds one, and the connections are compared in ``steps`` clocks, ``lanes`` a clock (the module's
    docstring)."""

    def __init__(self, *, jobs, workers, ports, management=None, header_clocks=1):
        self.jobs_count, self.workers, self.ports = jobs, workers, ports
        self.management = management
        self.queue_depth = 2 if header_clocks == 1 else 1
        self.connections_count = C = jobs * workers
        self.lanes = -(-C // header_clocks)
        self.steps = -(-C // self.lanes)
        self.Match = match_layout(self.connections_count, ports)
        self.Matched = data.StructLayout({"header": MonitoredHeader, "match": self.Match})
        super().__init__({
            "header": In(stream.Signature(ParsedHeader)),
            "port": In(stream.Signature(max(1, ceil_log2(ports)))),
            "o": Out(stream.Signature(self.Matched)),
            "switch": In(SwitchAddress),
            "jobs": In(data.ArrayLayout(JobEntry, jobs)),
            "connection_write": In(block_write_layout(CONNECTION, C)),
        })

    def elaborate(self, platform):
        m = Module()
        C, N = self.connections_count, self.workers
        # the queue: header and match, two entries; or, where a header comes every other clock at most, the
        # match alone, its header staying in the first stage's register until the match is taken
        whole = self.queue_depth == 2
        m.submodules.queue = queue = RegisterFIFO(width=self.Matched.size if whole else self.Match.size,
                                                  depth=self.queue_depth)
        h, port, sw = self.header.payload, self.port.payload, self.switch
        match = Signal(self.Match)
        ip_src, ip_dst = h.ip_src[:32], h.ip_dst[:32]
        ipv4 = h.ip_version == 4
        roce4 = h.roce & ipv4
        vlan = vlan_of(h)

        # (a place: a side's fields of its connection, by name)
        def comes_from(place, any_port=0):
            return ((port == place["port"]) | any_port) & (h.eth_src == place["mac"]) & (vlan == place["vlan"])

        def sent_by(place, any_port=0):
            return comes_from(place, any_port) & (ip_src == place["ip"])

        def goes_to(place):
            return (h.eth_dst == place["mac"]) & (ip_dst == place["ip"])

        # stage 1, registered: every connection's key and binding compared with the header (``lanes`` connections
        # a clock over ``steps`` clocks, the bits of the steps before the last kept), and the flags
        lanes, steps = self.lanes, self.steps
        step = Signal(range(steps))
        step_next = Signal(range(steps))        # what ``step`` holds from the next clock (the tables read at it)
        last = step == steps - 1
        m.d.comb += step_next.eq(step)
        m.d.sync += step.eq(step_next)
        write = self.connection_write
        Bits = data.StructLayout(dict.fromkeys(("data_key", "ack_key", "data_bound", "ack_bound", "from_requester",
                                                "from_responder"), C))
        kept, bits = Signal(Bits), Signal(Bits)     # the steps' bits so far; with this step's
        for lane in range(lanes):
            # this lane's connections, c = s * lanes + lane for each step s, in a table of its own read at the step
            m.submodules[f"connections_{lane}"] = table = ConnectionTable(connections=steps,
                                                                          registers=COMPARED_REGISTERS,
                                                                          read_ahead=True)
            m.d.comb += [table.write.offset.eq(write.offset), table.write.word.eq(write.word),
                         table.conn.eq(step_next)]
            with m.Switch(write.index):
                for c in range(lane, C, lanes):
                    with m.Case(c):
                        m.d.comb += [table.write.valid.eq(write.valid), table.write.index.eq(c // lanes)]
            e = table.entry
            requester, responder = ({name: e[f"{side}_{name}"] for name in ("mac", "ip", "port", "vlan")}
                                    for side in ("requester", "responder"))
            # the connection's job, and whether the connection is one of the build's, at each step
            at_step = [s * lanes + lane for s in range(steps)]
            job = [self.jobs[min(c // N, self.jobs_count - 1)] for c in at_step]
            job_valid = Array(Const(c < C) & j.valid for c, j in zip(at_step, job, strict=True))[step]
            job_lossy = Array(j.lossy for j in job)[step]
            registered = e.enable & job_valid
            compared_now = {
                "data_key": registered & (ip_src == requester["ip"]) & (h.bth_dest_qp == e.responder_qpn),
                "ack_key": registered & (ip_src == responder["ip"]) & (h.bth_dest_qp == e.requester_qpn),
                # (a bounded-loss job's data frames are sprayed over every port: their port is not compared)
                "data_bound": comes_from(requester, job_lossy) & goes_to(responder),
                "ack_bound": comes_from(responder) & goes_to(requester),
                "from_requester": sent_by(requester, job_lossy),
                "from_responder": sent_by(responder, any_port=1),
            }
            for c in range(lane, C, lanes):
                for name, value in compared_now.items():
                    m.d.comb += bits[name][c].eq(Mux(step == c // lanes, value, kept[name][c]))
        both = self.header.valid & self.port.valid
        with m.If(both & ~last):
            m.d.sync += kept.eq(bits)
            m.d.comb += step_next.eq(step + 1)

        Compared = data.StructLayout({"header": MonitoredHeader, "port": len(port), **Bits.members,
                                      "roce4": 1, "acknowledge": 1, "own": 1, "to_control_port": 1, "to_switch": 1,
                                      "to_management": 1, "from_manager": 1})
        # (the comparisons and the header are data, qualified by ``compared_valid``: no reset)
        compared, compared_valid, now = Signal(Compared, reset_less=True), Signal(), Signal(Compared)
        m.d.comb += [
            now.header.eq(monitored(h)), now.port.eq(port),
            *[now[name].eq(bits[name]) for name in Bits.members],
            now.roce4.eq(roce4), now.acknowledge.eq(h.bth_opcode == _ACKNOWLEDGE),
            now.own.eq((h.eth_src == sw.mac) | (ipv4 & (ip_src == sw.ip))),
            now.to_control_port.eq(ipv4 & ~h.roce & (h.ip_proto == 17) & (h.udp_dport == sw.control_port)),
            now.to_switch.eq(ip_dst == sw.ip),
        ]
        udp4 = ipv4 & ~h.roce & (h.ip_proto == 17)
        mg = self.management
        if mg is not None:
            # a frame from the management address is someone forging the switch's replies
            with m.If((h.eth_src == mg.switch_mac) | (ipv4 & (ip_src == mg.switch_ip))):
                m.d.comb += now.own.eq(1)
            m.d.comb += [
                now.to_management.eq(udp4 & (h.udp_dport == MANAGEMENT_PORT) & (h.eth_dst == mg.switch_mac)
                                     & (ip_dst == mg.switch_ip)),
                now.from_manager.eq((h.eth_src == mg.manager_mac) & (ip_src == mg.manager_ip)
                                    & (h.udp_sport == mg.manager_port) & ~h.vlan_valid
                                    & (port == mg.manager_ingress if mg.manager_ingress is not None else 1)),
            ]
        if whole:
            advance = ~compared_valid | queue.w_rdy
        else:
            advance = ~compared_valid | (queue.r_rdy & self.o.ready)
        # the header is taken, and its comparisons registered, at its last step
        done = last & advance
        m.d.comb += [self.header.ready.eq(self.port.valid & done), self.port.ready.eq(self.header.valid & done)]
        with m.If(advance):
            m.d.sync += [compared.eq(now), compared_valid.eq(both & last)]
        with m.If(both & done):
            m.d.comb += step_next.eq(0)

        # stage 2: the match, from the registered comparisons, into the queue
        is_ack = compared.roce4 & compared.acknowledge & compared.ack_key.any()
        is_data = compared.roce4 & ~is_ack & compared.data_key.any()
        bound = Signal()
        for c in reversed(range(C)):            # the first connection of the key, as the model's table
            with m.If(Mux(is_ack, compared.ack_key[c], compared.data_key[c])):
                m.d.comb += [match.conn.eq(c),
                             bound.eq(Mux(is_ack, compared.ack_bound[c], compared.data_bound[c]))]
        own, to_management = compared.own, compared.to_management
        to_control_port = compared.to_control_port & ~to_management
        m.d.comb += [
            match.ack.eq(is_ack & bound & ~own),
            match.data.eq(is_data & bound & ~own),
            match.control.eq(to_control_port & compared.to_switch & ~own),
            match.stray.eq(to_control_port & ~compared.to_switch & ~own),
            match.management.eq(to_management & compared.from_manager & ~own),
            match.refused.eq(to_management & ~compared.from_manager & ~own),
            match.spoofed.eq(own | ((is_ack | is_data) & ~bound)),
            match.port.eq(compared.port),
            match.from_requester.eq(compared.from_requester), match.from_responder.eq(compared.from_responder),
            queue.w_en.eq(compared_valid), self.o.valid.eq(queue.r_rdy), queue.r_en.eq(self.o.ready),
        ]
        if whole:
            m.d.comb += [queue.w_data.eq(Cat(compared.header.as_value(), match)), self.o.payload.eq(queue.r_data)]
        else:
            # (the register takes the match when empty: in the clock after its header came into ``compared``)
            m.d.comb += [queue.w_data.eq(match),
                         self.o.payload.header.eq(compared.header), self.o.payload.match.eq(queue.r_data)]
        return m
