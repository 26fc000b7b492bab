"""The switch's configuration and counters behind its ``csr`` port (``SwitchRegisters``).

The configuration is the register map of ``netreduce.registers`` (decoded by ``hw.csr.decode_registers``), held as
records that the other components read: ``switch`` (its addresses), ``jobs``, ``connections`` (each with the *place* of
its requester and of its responder: MAC, IPv4 address, port, VLAN) and the ``forwarding`` table. Writing an enable also
pulses ``job_enabled`` or ``connection_enabled`` for a clock, for the state that the enable resets (which the monitor
resets between frames). ``connection_write`` carries each write to the connection block's words
(``hw.csr.block_write_layout``) to the components that keep the connections' fields they read by connection in a
``ConnectionTable`` of their own, in the clock ``connections`` takes it.

Each port's egress stage (``hw.egress.EgressQueues``) takes its configuration from ``egress[p]`` and shows
its counters through ``egress_status[p]`` (the register map's ``egress`` block); the reset values are the
stage's own (the default map of ``netreduce.egress``). Its per-class counters are in its own memory: every
stage is told on ``egress_counter_read`` which of them the register port's address names, and shows it on
``egress_status[p].counter_value``.

On a board (``ethernet``), each port's MAC counters (``hw.ethernet.EthernetPort``, already in ``sync``)
come in through ``ethernet_status[p]`` and read as the register map's ``ethernet`` block.

Counters: ``increments`` carries, for one clock, how much each counter of ``netreduce.registers.COUNTERS``
grows (a field per counter, by name); the counter adds it a clock later, so that nothing that decides an
event runs into a 32-bit adder. A read shows its word ``READ_LATENCY`` clocks after its address
(``hw.csr``; the egress stages' counters take ``COUNTER_READ_LATENCY`` of them).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...egress import CLASSES, DSCPS, MAX_QUEUES
from ...registers import CONNECTION, COUNTERS, EGRESS, EGRESS_COUNTERS, ETHERNET_COUNTERS, READ_LATENCY, SWITCH
from ..csr import block_write_layout, csr_signature, decode_registers
from ..egress import COUNTER_READ_LATENCY
from ..ethernet import EthernetStatus

__all__ = ["Place", "SwitchAddress", "JobEntry", "ConnectionEntry", "ForwardingEntry", "SwitchRegisters",
           "fields_of", "vlan_of"]

COUNTER_BITS = 32

# where one side of a connection lives: the VLAN as its register holds it (0: untagged; 0x1000 + VID)
Place = data.StructLayout({"mac": 48, "ip": 32, "port": 8, "vlan": 13})
SwitchAddress = data.StructLayout({"mac": 48, "ip": 32, "control_port": 16, "default_port": 8})
JobEntry = data.StructLayout({"valid": 1, "id": 16, "workers": 8, "mtu": 13, "start_msg": 32, "lossy": 1,
                              "deadline": 32})
ConnectionEntry = data.StructLayout({"valid": 1, "requester": Place, "requester_qpn": 24, "responder": Place,
                                     "responder_qpn": 24, "start_psn": 24, "responder_rkey": 32})
ForwardingEntry = data.StructLayout({"valid": 1, "mac": 48, "port": 8})


def fields_of(records, count, *path):
    """``[records[i].<path> for i in range(count)]``: one field of each record of an array of records."""
    values = []
    for i in range(count):
        value = records[i]
        for name in path:
            value = value[name]
        values.append(value)
    return values


def vlan_of(header):
    """A parsed header's VLAN in the registers' encoding: 0 untagged, 0x1000 + VID tagged (PCP and DEI
    dropped; a header without a tag reads ``vlan_tci`` 0)."""
    return Cat(header.vlan_tci[:12], header.vlan_valid)


class SwitchRegisters(wiring.Component):
    """``SwitchRegisters(*, jobs, workers, forwarding_entries, mtu, increment_bits, egress, ports,
    ethernet=False, bounded_loss=True)``: the configuration of ``jobs`` jobs of up to ``workers`` workers
    (connection ``c = j * workers + w``), a forwarding table, and ``ports`` egress stages shaped like
    ``egress`` (an ``EgressQueues``; every port's is the same); a job's MTU is at most the build's ``mtu`` (a
    larger write is taken as ``mtu``); with ``ethernet``, each port's MAC counters (``ethernet_status``).
    Without ``bounded_loss`` (a build without the bounded-loss class) a job whose ``traffic_class`` is
    written 1 is not valid, whatever its ``enable``, and no job is ``lossy``."""

    def __init__(self, *, jobs, workers, forwarding_entries, mtu, increment_bits, egress, ports, ethernet=False,
                 bounded_loss=True):
        self.bounded_loss = bounded_loss
        self.jobs_count, self.workers, self.forwarding_entries, self.mtu = jobs, workers, forwarding_entries, mtu
        self.ports, self.queues, self.ethernet = ports, egress.queues, ethernet
        self.egress_config_members = tuple(egress.config_layout.members)
        self.connections_count = jobs * workers
        self.increment_layout = data.StructLayout(dict.fromkeys(COUNTERS, increment_bits))
        super().__init__({
            "csr": In(csr_signature()),
            "switch": Out(SwitchAddress, init={"control_port": SWITCH.register("control_port").init}),
            "jobs": Out(data.ArrayLayout(JobEntry, jobs), init=[{"mtu": mtu}] * jobs),
            "connections": Out(data.ArrayLayout(ConnectionEntry, self.connections_count)),
            "forwarding": Out(data.ArrayLayout(ForwardingEntry, forwarding_entries)),
            "job_enabled": Out(jobs),
            "connection_enabled": Out(self.connections_count),
            "connection_write": Out(block_write_layout(CONNECTION, self.connections_count)),
            "increments": In(self.increment_layout),
            "counters": Out(data.ArrayLayout(COUNTER_BITS, len(COUNTERS))),
            "egress": Out(data.ArrayLayout(egress.config_layout, ports), init=[egress.config_init] * ports),
            "egress_status": In(data.ArrayLayout(egress.status_layout, ports)),
            "egress_counter_read": Out(egress.counter_read.shape()),
            **({"ethernet_status": In(data.ArrayLayout(EthernetStatus, ports))} if ethernet else {}),
        })

    @property
    def parameters(self):
        """What sizes the register map (``netreduce.registers.instances``)."""
        return {"jobs": self.jobs_count, "workers": self.workers, "forwarding_entries": self.forwarding_entries,
                "ports": self.ports, "ethernet": self.ethernet}

    def elaborate(self, platform):
        m = Module()
        J, C, E = self.jobs_count, self.connections_count, self.forwarding_entries
        jobs, conns, fwd = self.jobs, self.connections, self.forwarding

        targets = {f"switch.{name}": [self.switch[name]] for name in ("mac", "ip", "control_port", "default_port")}
        targets.update({f"job.{name}": fields_of(jobs, J, field)
                        for name, field in (("id", "id"), ("workers", "workers"), ("enable", "valid"),
                                            ("mtu", "mtu"), ("start_msg", "start_msg"),
                                            ("traffic_class", "lossy"), ("deadline_clocks", "deadline"))})
        if not self.bounded_loss:
            # the enable and the class are held here; a job asked to be bounded-loss stays invalid
            enable = [Signal(name=f"job_enable_{j}") for j in range(J)]
            asked_lossy = [Signal(name=f"job_asked_lossy_{j}") for j in range(J)]
            targets["job.enable"], targets["job.traffic_class"] = enable, asked_lossy
            m.d.comb += [jobs[j].valid.eq(enable[j] & ~asked_lossy[j]) for j in range(J)]
        targets.update({f"forwarding.{name}": fields_of(fwd, E, field)
                        for name, field in (("mac", "mac"), ("port", "port"), ("enable", "valid"))})
        for side in ("requester", "responder"):
            for name in ("mac", "ip", "port", "vlan"):
                targets[f"connection.{side}_{name}"] = fields_of(conns, C, side, name)
            targets[f"connection.{side}_qpn"] = fields_of(conns, C, f"{side}_qpn")
        targets["connection.start_psn"] = fields_of(conns, C, "start_psn")
        targets["connection.responder_rkey"] = fields_of(conns, C, "responder_rkey")
        targets["connection.enable"] = fields_of(conns, C, "valid")
        readable = {f"counters.{name}": self.counters[i] for i, name in enumerate(COUNTERS)}
        transforms = {"job.mtu": lambda word: Mux(word > self.mtu, self.mtu, word)}
        self._egress_registers(m, targets, readable, transforms)
        for name in ETHERNET_COUNTERS:
            readable[f"ethernet.{name}"] = ([self.ethernet_status[p][name] for p in range(self.ports)]
                                            if self.ethernet else [])
        strobes = decode_registers(m, self.csr, self.parameters, targets, readable, transforms,
                                   writes={"connection": self.connection_write})
        m.d.comb += [self.job_enabled.eq(strobes["job.enable"]),
                     self.connection_enabled.eq(strobes["connection.enable"])]

        # each counter adds a clock after its event what the event's clock set
        added = Signal(self.increment_layout)
        m.d.sync += added.eq(self.increments)
        for i, name in enumerate(COUNTERS):
            m.d.sync += self.counters[i].eq(self.counters[i] + added[name])
        return m

    def _egress_registers(self, m, targets, readable, transforms):
        """The ``egress`` block of each port: its stage's configuration and counters. The registers of
        queues the build does not have (q >= Q), and ``scheduling`` and the quanta of a stage built
        without deficit round robin, are written to nowhere (and the counters of absent queues read 0)."""
        P, Q = self.ports, self.queues
        config, status = self.egress, self.egress_status
        for d in range(DSCPS):
            targets[f"egress.dscp{d}_class"] = [config[p].dscp_class[d] for p in range(P)]
        for c in range(CLASSES):
            for name in ("queue", "droppable", "threshold"):
                targets[f"egress.class{c}_{name}"] = [config[p].class_table[c][name] for p in range(P)]
            transforms[f"egress.class{c}_queue"] = lambda word: Mux(word > Q - 1, Q - 1, word)
            for name in EGRESS_COUNTERS:
                # every port's stage shows the counter that the address names (``egress_counter_read``), so
                # the read tree's leaves for them are one value
                readable[f"egress.{name}{c}"] = [status[p].counter_value for p in range(P)]
        weighted = "scheduling" in self.egress_config_members
        targets["egress.scheduling"] = [config[p].scheduling if weighted else Signal(name=f"no_scheduling_{p}")
                                        for p in range(P)]
        for q in range(MAX_QUEUES):
            targets[f"egress.quantum{q}"] = [config[p].quantum[q] if weighted and q < Q
                                            else Signal(16, name=f"no_quantum_{p}_{q}") for p in range(P)]
            readable[f"egress.high_water{q}"] = [status[p].high_water[q] if q < Q else 0 for p in range(P)]
        for name in ("drops_oversize", "occupancy"):
            readable[f"egress.{name}"] = [status[p][name] for p in range(P)]
        assert COUNTER_READ_LATENCY == READ_LATENCY - 2, "the read tree takes the egress counters when they show"
        first = EGRESS.register(f"{next(iter(EGRESS_COUNTERS))}0").offset
        m.d.comb += self.egress_counter_read.eq(self.csr.addr[:exact_log2(EGRESS.stride)] - first)
