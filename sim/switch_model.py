"""Golden model of the NetReduce switch, at packet level.

Written from docs/ARCHITECTURE.md ("Aggregation (the NetReduce switch)"), the RoCE v2 rules and IEEE 754
(through :func:`netreduce.sim.fp.tree_sum`), never from the RTL. Given the configuration and the frames
arriving on each port, in order, :meth:`SwitchModel.receive` returns the frames leaving, each with its
port, and keeps the counters. The RTL testbenches compare against it frame for frame and byte for byte; a
user runs it to predict what the hardware will do.

Frames are bytes without preamble and FCS, as a MAC delivers them. Parsing and deparsing are those of
:mod:`netreduce.sim.roce_model`.

Every frame is untrusted (docs/ARCHITECTURE.md, "Trust model"): a frame of a registered connection counts
only when it is *bound* to it (arrived on the configured port, from the configured MAC and VLAN, to the
configured destination), an ACK moves a connection's delivered PSN no further than the newest result the
switch has sent on it, and frames in the switch's own name are dropped. Message sequence numbers are
compared modulo 2^32 (:func:`netreduce.wire.msg_distance`), PSNs modulo 2^24.

A job of the bounded-loss class (``JobConfig(traffic_class="lossy", deadline_clocks=D)``; docs/ARCHITECTURE.md,
"Bounded-loss class (MLT)") aggregates single-packet UC messages identified by their aggregation header, in
any order and from any port, and completes each one when every worker has contributed or ``D`` clocks after
it opened. The switch's clock is the ``now`` given with each frame (:meth:`SwitchModel.receive`) or to
:meth:`SwitchModel.advance`; without it the clock stands still, and the reliable class never needs it.
"""

import dataclasses
import enum
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from netreduce.host.management import build_management_frame, parse_management_payload
from netreduce.host.protocol import (
    AggHeader,
    ControlMessage,
    build_control_frame,
    ip_to_int,
    mac_to_int,
    parse_control_payload,
    udp_payload,
)
from netreduce.registers import COUNTER_BLOCK, COUNTERS, HISTOGRAM_COUNTERS, RegisterFile, locate
from netreduce.sim.fp import get_format, tree_sum
from netreduce.sim.roce_model import deparse_frame, has_udp, parse_frame, verdict_good
from netreduce.wire import (
    AGG_HEADER_BYTES,
    CONTROL_PACKET,
    CONTROL_PORT,
    GAP_PSN_SHIFT,
    MANAGEMENT_PACKET,
    MANAGEMENT_PORT,
    MSG_SEQ_MODULUS,
    PSN_MODULUS,
    RC_WRITE_OPCODES,
    RESULT_RESENDS,
    UC_WRITE_OPCODES,
    AethSyndrome,
    ControlType,
    ManagementOp,
    header_bytes,
    msg_distance,
    psn_distance,
)

__all__ = ["JobClass", "JobConfig", "ConnectionConfig", "SwitchConfig", "SwitchModel", "SlotState", "COUNTERS",
           "config_from_registers",
           "GAP_PSN_SHIFT", "LOSSY_MAX_WORKERS", "HISTOGRAM_COUNTERS", "contributors_counter"]

_FIRST = {RC_WRITE_OPCODES["FIRST"], RC_WRITE_OPCODES["ONLY"], RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_LAST = {RC_WRITE_OPCODES["LAST"], RC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"], RC_WRITE_OPCODES["ONLY"],
         RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_WRITES = set(RC_WRITE_OPCODES.values())
_ACKNOWLEDGE = 0x11
_ELEMENT_ALIGN = 4      # payload lengths are whole 32-bit words: one binary32 or two 16-bit elements
_CONTROL_UDP_LEN = 8 + header_bytes(CONTROL_PACKET)     # 20: a UDP length that holds the whole control message
_MANAGEMENT_UDP_LEN = 8 + header_bytes(MANAGEMENT_PACKET)   # 20 likewise
_VID_MASK = 0xFFF
_LOSSY_OPCODE = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]     # 0x2B: a bounded-loss job's only data opcode
LOSSY_MAX_WORKERS = 32          # the contributor bitmap is the 32-bit immediate
DEADLINE_LIMIT = 1 << 31         # the RTL compares clocks modulo 2^32


def contributors_counter(n):
    """The counter of a completion with ``n`` contributors."""
    return HISTOGRAM_COUNTERS[min(n, len(HISTOGRAM_COUNTERS) - 1)]


class JobClass(enum.Enum):
    """The traffic class of a job (docs/ARCHITECTURE.md, "Bounded-loss class (MLT)"): ``RELIABLE`` RC
    messages of up to M packets, summed when every worker's packet is in (rules 1-8); ``LOSSY``
    single-packet UC messages, summed when every worker's is in or at the job's deadline."""
    RELIABLE = "reliable"
    LOSSY = "lossy"


class SlotState(enum.Enum):
    """A bounded-loss job's message slot: never used, holding an open message, or holding a completed
    one's result (until a later message opens the slot)."""
    FREE = "free"
    OPEN = "open"
    COMPLETE = "complete"


@dataclass(frozen=True)
class JobConfig:
    """A job of ``workers`` workers. ``message_slots`` K, a power of two, is the credit window; the job's
    first message is ``start_msg`` (its sequence numbers go on modulo 2^32). ``traffic_class``: a
    :class:`JobClass` or its value; a ``"lossy"`` job has at most 32 workers, K at least 2 (its window is
    K/2) and a ``deadline_clocks`` of at least 1, a reliable one none."""
    job: int
    workers: int
    dtype: str = "fp32"
    mtu: int = 1024
    message_packets: int = 4
    message_slots: int = 4
    ftz: bool = False
    start_msg: int = 0
    traffic_class: JobClass = JobClass.RELIABLE
    deadline_clocks: int | None = None

    def __post_init__(self):
        get_format(self.dtype)      # ValueError naming the formats (the names of wire.DTYPE_CODES)
        try:
            object.__setattr__(self, "traffic_class", JobClass(self.traffic_class))
        except ValueError:
            raise ValueError(f"traffic_class {self.traffic_class!r} is neither "
                             f"{' nor '.join(repr(c.value) for c in JobClass)}") from None
        if not 0 <= self.job < 1 << 16:
            raise ValueError(f"job id {self.job} does not fit in 16 bits")
        for name in ("workers", "mtu", "message_packets", "message_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.mtu % _ELEMENT_ALIGN or self.mtu < AGG_HEADER_BYTES + _ELEMENT_ALIGN:
            raise ValueError(f"mtu {self.mtu} must be a multiple of 4 and at least {AGG_HEADER_BYTES + 4}")
        if self.message_slots & (self.message_slots - 1):
            # message s uses slot s mod K: only a power of two keeps that continuous across 2^32
            raise ValueError(f"message_slots {self.message_slots} is not a power of two")
        if not 0 <= self.start_msg < MSG_SEQ_MODULUS:
            raise ValueError(f"start_msg {self.start_msg} does not fit in 32 bits")
        if not self.lossy:
            if self.deadline_clocks is not None:
                raise ValueError("deadline_clocks is for bounded-loss jobs only (traffic_class='lossy')")
            return
        if self.workers > LOSSY_MAX_WORKERS:
            raise ValueError(f"a bounded-loss job has at most {LOSSY_MAX_WORKERS} workers (the bitmap in the "
                             f"immediate), not {self.workers}")
        if self.message_slots < 2:
            raise ValueError("a bounded-loss job needs message_slots of at least 2 (its window is half of them)")
        if not isinstance(self.deadline_clocks, int) or not 1 <= self.deadline_clocks < DEADLINE_LIMIT:
            raise ValueError(f"a bounded-loss job needs deadline_clocks from 1 to {DEADLINE_LIMIT - 1} (the switch's "
                             f"clock counts modulo 2^32), not {self.deadline_clocks!r}")

    @property
    def lossy(self):
        return self.traffic_class is JobClass.LOSSY

    @property
    def window(self):
        """The messages a worker may have in the switch at once: K, or K/2 for a bounded-loss job (whose
        other half of the slots keep earlier results for the receivers that ask again)."""
        return self.message_slots // 2 if self.lossy else self.message_slots

    @property
    def packets_per_message(self):
        """The most packets of one message: ``message_packets``, or 1 for a bounded-loss job."""
        return 1 if self.lossy else self.message_packets


@dataclass(frozen=True)
class ConnectionConfig:
    """Worker ``worker`` of ``job``: its requester (on the worker's host) writes to the responder (on the
    peer host). MACs and IPv4 addresses as strings or ints; QPNs 24 bits. ``requester_port`` and
    ``responder_port`` are the switch ports each side's frames arrive on, ``requester_vlan`` and
    ``responder_vlan`` ``None`` (untagged frames) or the 12-bit VLAN id each side's frames are tagged with:
    with the MACs and IPv4 addresses they bind the connection's frames to where its hosts are (a bounded-loss
    job's data frames and requests: anywhere but the port). ``responder_rkey`` (bounded-loss jobs, required):
    the R_Key of the responder's result buffer, which every result to it carries."""
    job: int
    worker: int
    requester_mac: object
    requester_ip: object
    requester_qpn: int
    responder_mac: object
    responder_ip: object
    responder_qpn: int
    start_psn: int = 0
    requester_port: int = 0
    requester_vlan: int | None = None
    responder_port: int = 0
    responder_vlan: int | None = None
    responder_rkey: int | None = None

    def __post_init__(self):
        for side in ("requester", "responder"):
            vlan = getattr(self, f"{side}_vlan")
            if vlan is not None and not 0 <= vlan <= _VID_MASK:
                raise ValueError(f"{side}_vlan {vlan} is not a 12-bit VLAN id (or None: untagged)")
        if self.responder_rkey is not None and not 0 <= self.responder_rkey < 1 << 32:
            raise ValueError(f"responder_rkey {self.responder_rkey} is not a 32-bit R_Key")


@dataclass
class SwitchConfig:
    mac: object = "02:4e:52:00:00:01"
    ip: object = "10.0.255.1"
    control_port: int = CONTROL_PORT
    ports: int = 1
    forwarding: dict = field(default_factory=dict)     # destination MAC -> port
    default_port: int = 0
    max_frame: int = 9216                              # longest payload stream (whole frame if not RoCE)
    ipv6: bool = True                                  # RoCE over IPv6 is parsed (the build's ``ipv6``)
    bounded_loss: bool = True                          # the build has the bounded-loss class (``bounded_loss``)
    jobs: list = field(default_factory=list)           # JobConfig
    connections: list = field(default_factory=list)    # ConnectionConfig

    def port_of(self, mac):
        return self._forwarding.get(mac, self.default_port)

    def __post_init__(self):
        self._forwarding = {mac_to_int(mac): port for mac, port in self.forwarding.items()}
        if not self.bounded_loss:
            for job in self.jobs:
                if job.lossy:
                    raise ValueError(f"job {job.job} is bounded-loss, and the build has no bounded-loss class "
                                     "(bounded_loss=False)")
        for port in list(self._forwarding.values()) + [self.default_port]:
            if not 0 <= port < self.ports:
                raise ValueError(f"port {port} is not one of the {self.ports} ports")
        for conn in self.connections:
            for side in ("requester", "responder"):
                port = getattr(conn, f"{side}_port")
                if not 0 <= port < self.ports:
                    raise ValueError(f"job {conn.job} worker {conn.worker}: {side}_port {port} is not one of "
                                     f"the {self.ports} ports")


class _PacketSlot:
    __slots__ = ("bitmap", "length", "headers", "payloads", "sum")

    def __init__(self, workers):
        self.bitmap = 0
        self.length = None
        self.headers = [None] * workers
        self.payloads = [None] * workers
        self.sum = None


class _MessageSlot:
    """One message of a job in the switch: M packet slots and, per worker, the first PSN and (once the
    worker's last packet came) the packet count."""
    __slots__ = ("busy", "seq", "packets", "first_psn", "count")

    def __init__(self, job):
        self.busy = False
        self.seq = None
        self.packets = [_PacketSlot(job.workers) for _ in range(job.message_packets)]
        self.first_psn = [None] * job.workers
        self.count = [None] * job.workers


class _LossySlot:
    """A message slot of a bounded-loss job: the message it holds (``seq``, open or completed), the clock it
    opened at, its contributor bitmap and length; while open, each contributor's header record and payload;
    once completed with contributors, the sum, the template (the lowest-numbered contributor's header record)
    and the template's aggregation-header bytes; per worker, the times its receiver has had the result again
    (``resends``)."""
    __slots__ = ("state", "seq", "opened", "bitmap", "length", "headers", "payloads", "sum", "template",
                 "template_head", "resends")

    def __init__(self):
        self.state, self.seq, self.opened = SlotState.FREE, None, None
        self.bitmap, self.length = 0, None
        self.headers = self.payloads = self.sum = self.template = self.template_head = self.resends = None

    def holds(self, seq):
        return self.state is not SlotState.FREE and self.seq == seq

    def open(self, seq, now, workers):
        self.state, self.seq, self.opened = SlotState.OPEN, seq, now
        self.bitmap, self.length = 0, None
        self.headers, self.payloads = [None] * workers, [None] * workers
        self.resends = [0] * workers
        self.sum = self.template = self.template_head = None


class _Job:
    def __init__(self, config):
        self.config = config
        self.fmt = get_format(config.dtype)
        if config.lossy:
            self.slots = [_LossySlot() for _ in range(config.message_slots)]
        else:
            self.slots = [_MessageSlot(config) for _ in range(config.message_slots)]
        self.oldest = config.start_msg          # the oldest message not yet released (modulo 2^32)
        self.connections = [None] * config.workers
        self.full = (1 << config.workers) - 1


class _Connection:
    """A connection's state, and its binding: where its data frames (requester) and its ACKs (responder)
    must come from and go to."""
    __slots__ = ("config", "job", "worker", "expected", "delivered", "sent", "next_seq", "slot", "requester",
                 "responder")

    def __init__(self, config, job):
        self.config = config
        self.job = job
        self.worker = config.worker
        self.expected = config.start_psn % PSN_MODULUS
        self.delivered = (config.start_psn - 1) % PSN_MODULUS
        self.sent = self.delivered          # the PSN of the newest result sent toward the responder
        self.next_seq = job.config.start_msg
        self.slot = None        # the message slot of the message in progress, None between messages
        self.requester = _Place(config.requester_mac, config.requester_ip, config.requester_port,
                                config.requester_vlan)
        self.responder = _Place(config.responder_mac, config.responder_ip, config.responder_port,
                                config.responder_vlan)

    def data_bound(self, port, h):
        """A data frame comes from the requester's place and goes to the responder (for a bounded-loss job,
        from any port)."""
        return (self.requester.is_source(None if self.job.config.lossy else port, h)
                and self.responder.is_destination(h))

    def ack_bound(self, port, h):
        """An ACK or NAK comes from the responder's place and goes to the requester."""
        return self.responder.is_source(port, h) and self.requester.is_destination(h)


class _Place:
    """A host as the switch knows it: MAC, IPv4 address, the port it is on and its VLAN."""
    __slots__ = ("mac", "ip", "port", "vlan")

    def __init__(self, mac, ip, port, vlan):
        self.mac, self.ip, self.port, self.vlan = mac_to_int(mac), ip_to_int(ip), port, vlan

    def is_source(self, port, h):
        """The frame arrived from here: on this port (``None``: on any port), from this MAC, in this VLAN (the
        key or the control check has already matched the source IP)."""
        if (port is not None and port != self.port) or h["eth_src"] != self.mac:
            return False
        if self.vlan is None:
            return not h["vlan_valid"]
        return bool(h["vlan_valid"]) and h["vlan_tci"] & _VID_MASK == self.vlan

    def is_destination(self, h):
        """The frame is addressed here: destination MAC and IPv4 address."""
        return h["eth_dst"] == self.mac and h["ip_dst"] == self.ip


class SwitchModel:
    """The switch: ``receive(port, frame, now=None)`` returns ``[(port, frame), ...]``; ``counters`` counts;
    ``contributors`` is the exact histogram of the bounded-loss completions by number of contributors; ``now``
    is the switch's clock (advanced by ``receive(..., now=)`` and :meth:`advance`)."""

    def __init__(self, config, *, management=None, build=None):
        self.counters = Counter(dict.fromkeys(COUNTERS, 0))
        self.contributors = Counter()
        self.now = 0
        self.management, self.build, self.registers = management, build, None
        if management is not None:
            if build is None:
                raise ValueError("a switch managed in-band needs its build's parameters (NetReduceSwitch.parameters)")
            # a job's MTU resets to the build's, and a larger one written is taken as the build's (as in the RTL)
            self.registers = RegisterFile(build, reset={("job", j, "mtu"): build["mtu"] for j in range(build["jobs"])},
                                          limits={("job", "mtu"): build["mtu"]})
        self._configure(config)

    @classmethod
    def managed(cls, build, management):
        """The switch of build ``build`` (``NetReduceSwitch.parameters``) as it leaves reset, configured only
        through management packets from the manager of ``management`` (a ``netreduce.wire.ManagementAddress``)."""
        model = cls(SwitchConfig(ports=build["ports"], max_frame=build["max_frame"], ipv6=build.get("ipv6", True),
                                 bounded_loss=build.get("bounded_loss", True)),
                    management=management, build=build)
        model._configure(config_from_registers(model.registers, build))
        return model

    def _configure(self, config):
        """Take ``config``: every job and connection from its first state."""
        self.config = config
        self._mac = mac_to_int(config.mac)
        self._ip = ip_to_int(config.ip)
        self.jobs = {}
        for job in config.jobs:
            if job.job in self.jobs:
                raise ValueError(f"job {job.job} is configured twice")
            self.jobs[job.job] = _Job(job)
        self._data, self._ack = {}, {}
        for conn in config.connections:
            job = self.jobs.get(conn.job)
            if job is None:
                raise ValueError(f"connection of worker {conn.worker} names unknown job {conn.job}")
            if not 0 <= conn.worker < job.config.workers or job.connections[conn.worker] is not None:
                raise ValueError(f"job {conn.job}: worker {conn.worker} is out of range or configured twice")
            state = _Connection(conn, job)
            job.connections[conn.worker] = state
            data_key = (ip_to_int(conn.requester_ip), conn.responder_qpn)
            ack_key = (ip_to_int(conn.responder_ip), conn.requester_qpn)
            if data_key in self._data or ack_key in self._ack:
                raise ValueError(f"job {conn.job} worker {conn.worker}: connection key already in use")
            self._data[data_key] = state
            self._ack[ack_key] = state
        for job in self.jobs.values():
            missing = [w for w, c in enumerate(job.connections) if c is None]
            if missing:
                raise ValueError(f"job {job.config.job}: no connection for workers {missing}")
            if job.config.lossy and any(c.config.responder_rkey is None for c in job.connections):
                raise ValueError(f"job {job.config.job} is bounded-loss: every connection needs responder_rkey")
        self._lossy_jobs = [job for job in self.jobs.values() if job.config.lossy]

    # --- entry point ----------------------------------------------------------------------------------

    def receive(self, port, frame, now=None):
        """The frames leaving for ``frame`` arriving on ``port`` at clock ``now`` (``None``: the clock stands
        still); the deadlines up to ``now`` fire first, and their frames come first."""
        self.counters["frames_in"] += 1
        out = []
        if now is not None:
            self._expire(now, out)
        parsed = parse_frame(frame, ipv6=self.config.ipv6)
        h = parsed.header
        if len(parsed.payload) > self.config.max_frame:      # (whatever its checksums: a port may drop it unread)
            self.counters["drop_oversize"] += 1
        elif h["roce"] and not verdict_good(h, parsed.verdict):
            self.counters["drop_bad_icrc" if not parsed.verdict["icrc_ok"] else "drop_bad_checksum"] += 1
        elif self._in_switch_name(h):
            self.counters["drop_spoofed"] += 1          # someone speaking in the switch's name
        elif self._is_management(h):
            self._management(port, h, parsed.payload, out)
        elif self._is_control(h):
            self._control(port, h, parsed.payload, out)
        elif not h["roce"] or h["ip_version"] != 4:
            self._forward(parsed, out)
        else:
            key = (h["ip_src"], h["bth_dest_qp"])
            if h["bth_opcode"] == _ACKNOWLEDGE and key in self._ack:
                conn = self._ack[key]
                if not conn.ack_bound(port, h):
                    self.counters["drop_spoofed"] += 1
                else:
                    self._acknowledge(conn, h)
                    self._forward(parsed, out)
                    self._release(conn.job, out)
            elif key in self._data:
                conn = self._data[key]
                if not conn.data_bound(port, h):
                    self.counters["drop_spoofed"] += 1
                else:
                    self._data_packet(conn, parsed, out)
            else:
                self._forward(parsed, out)
        self.counters["frames_out"] += len(out)
        return out

    def advance(self, now):
        """Move the clock to ``now`` and fire every deadline up to it: the frames leaving."""
        out = []
        self._expire(now, out)
        self.counters["frames_out"] += len(out)
        return out

    @property
    def next_deadline(self):
        """The clock of the earliest deadline of an open bounded-loss message, or ``None``."""
        return min((slot.opened + job.config.deadline_clocks for job in self._lossy_jobs for slot in job.slots
                    if slot.state is SlotState.OPEN), default=None)

    def _emit(self, frame, out):
        out.append((self.config.port_of(int.from_bytes(frame[:6], "big")), frame))

    def _forward(self, parsed, out):
        self.counters["forwarded"] += 1
        self._pass(parsed, out)

    def _pass(self, parsed, out):
        """A frame goes on unchanged: a non-RoCE frame byte for byte, a RoCE frame through the deparser
        (the same bytes up to the IP end; what followed it becomes zero padding up to 60 bytes)."""
        h = parsed.header
        self._emit(deparse_frame(h, parsed.payload) if h["roce"] else parsed.payload, out)

    def _in_switch_name(self, h):
        """The frame's source is the switch's MAC or IPv4 address, or its management MAC or IPv4 address."""
        ipv4 = h["ip_version"] == 4
        m = self.management
        return (h["eth_src"] == self._mac or (ipv4 and h["ip_src"] == self._ip)
                or (m is not None and (h["eth_src"] == m.switch_mac or (ipv4 and h["ip_src"] == m.switch_ip))))

    # --- management packets (the in-band control plane) -----------------------------------------------

    def _is_management(self, h):
        """IPv4 UDP, not RoCE, to the management port of the management address (of a managed switch)."""
        m = self.management
        return (m is not None and h["ip_version"] == 4 and has_udp(h) and not h["roce"]
                and h["udp_dport"] == MANAGEMENT_PORT and h["eth_dst"] == m.switch_mac and h["ip_dst"] == m.switch_ip)

    def _management(self, port, h, frame_payload, out):
        """A management request: answered, to the port it came in on, only when it comes from the manager
        (MAC, IPv4 address, UDP port, untagged, and its port if the address names one), holds a whole valid
        request and is not itself a reply; nothing is forwarded."""
        m = self.management
        if not (h["eth_src"] == m.manager_mac and h["ip_src"] == m.manager_ip and h["udp_sport"] == m.manager_port
                and not h["vlan_valid"] and (m.manager_ingress is None or port == m.manager_ingress)):
            self.counters["management_refused"] += 1
            return
        message = (parse_management_payload(udp_payload(frame_payload, h))
                   if h["udp_len"] >= _MANAGEMENT_UDP_LEN else None)
        if message is None or message.reply:
            self.counters["management_bad"] += 1
            return
        self.counters["management_requests"] += 1
        value = message.value
        if message.op == ManagementOp.WRITE:
            self._register_written(self.registers.write(message.address, message.value))
        else:
            value = self._read_register(message.address)
        out.append((port, build_management_frame(dataclasses.replace(message, value=value, reply=True), m)))

    def _read_register(self, word_address):
        """A read-only word as the register port shows it: a counter (this model keeps no egress stage and no
        Ethernet MAC, so their status words read 0, as every configuration word does)."""
        found = locate(word_address, self.build)
        if found is None or found[0] is not COUNTER_BLOCK:
            return 0
        return self.counters[found[2].name] % (1 << 32)

    def _register_written(self, key):
        """A written register takes effect: the switch's addresses and the forwarding table at once; a job's and
        a connection's registers when its ``enable`` is written, which here starts every job and connection
        afresh from the registers (the RTL resets only the one enabled; docs "In-band control plane")."""
        if key is None:
            return
        block_name, _, name = key
        starts = block_name in ("job", "connection") and name == "enable"
        if block_name in ("switch", "forwarding") or starts:
            config = config_from_registers(self.registers, self.build)
            if starts:
                self._configure(config)
            else:
                jobs, connections = self.config.jobs, self.config.connections
                self.config = config
                self.config.jobs, self.config.connections = jobs, connections
                self._mac, self._ip = mac_to_int(config.mac), ip_to_int(config.ip)

    # --- control packets ------------------------------------------------------------------------------

    def _is_control(self, h):
        """IPv4 UDP (a decoded UDP header: not a fragment), not RoCE, to the control port."""
        return (h["ip_version"] == 4 and has_udp(h) and not h["roce"]
                and h["udp_dport"] == self.config.control_port)

    def _control(self, port, h, frame_payload, out):
        """A control packet: only a CREDIT_REQUEST to the switch from the requester of the worker it names,
        or a bounded-loss job's RESULT_REQUEST from the responder (the receiver) of the worker it names, is
        answered; nothing is forwarded."""
        message = conn = None
        if h["ip_dst"] == self._ip and h["udp_len"] >= _CONTROL_UDP_LEN:
            # the parser puts a non-RoCE frame whole into its payload stream; the message ends where the UDP
            # length says, and a frame too short to hold it holds none
            message = parse_control_payload(udp_payload(frame_payload, h))
            conn = self._control_sender(port, h, message)
        if conn is None:
            self.counters["drop_control"] += 1
        elif message.type == ControlType.CREDIT_REQUEST:
            self.counters["credit_requests"] += 1
            self._send_credit(conn, out)
        else:
            self._result_request(conn, message.value, out)

    def _control_sender(self, port, h, message):
        """The connection whose worker ``message`` speaks for, if the switch answers it and it comes from that
        worker's place: a CREDIT_REQUEST from the requester, a RESULT_REQUEST of a bounded-loss job from the
        responder (on any port for a bounded-loss job); else ``None``."""
        if message is None or message.type not in (ControlType.CREDIT_REQUEST, ControlType.RESULT_REQUEST):
            return None
        job = self.jobs.get(message.job)
        if job is None or message.worker >= job.config.workers:
            return None
        conn = job.connections[message.worker]
        if message.type == ControlType.CREDIT_REQUEST:
            place = conn.requester
        elif job.config.lossy:
            place = conn.responder
        else:
            return None
        if h["ip_src"] == place.ip and place.is_source(None if job.config.lossy else port, h):
            return conn
        return None

    def _send_credit(self, conn, out):
        job = conn.job
        allowed = (job.oldest + job.config.window - 1) % MSG_SEQ_MODULUS
        message = ControlMessage(ControlType.CREDIT, job.config.job, conn.worker, allowed)
        self._emit(build_control_frame(message, src_mac=self._mac, dst_mac=conn.config.requester_mac,
                                       src_ip=self._ip, dst_ip=conn.config.requester_ip,
                                       port=self.config.control_port), out)
        self.counters["credits_sent"] += 1

    # --- ACK direction ----------------------------------------------------------------------------------

    def _acknowledge(self, conn, h):
        self.counters["acks_seen"] += 1
        syndrome = h["aeth_syndrome"]
        if syndrome >> 5 == 0:
            through = h["bth_psn"]
        elif syndrome == AethSyndrome.NAK_PSN_SEQUENCE_ERROR:
            through = (h["bth_psn"] - 1) % PSN_MODULUS
        else:
            return
        # only forward progress, and never past the newest result the switch has sent
        if 0 < psn_distance(through, conn.delivered):
            if psn_distance(through, conn.sent) <= 0:
                conn.delivered = through
            else:
                self.counters["acks_ahead"] += 1

    def _release(self, job, out):
        """Release the job's oldest messages while every worker's receiver has them all (a bounded-loss job's
        messages are released by their completion instead)."""
        if job.config.lossy:
            return
        while True:
            slot = job.slots[job.oldest % job.config.message_slots]
            if not slot.busy or slot.seq != job.oldest:
                return
            for w, conn in enumerate(job.connections):
                count = slot.count[w]
                if count is None:
                    return
                last = (slot.first_psn[w] + count - 1) % PSN_MODULUS
                if psn_distance(conn.delivered, last) < 0:
                    return
            job.slots[job.oldest % job.config.message_slots] = _MessageSlot(job.config)
            job.oldest = (job.oldest + 1) % MSG_SEQ_MODULUS
            for conn in job.connections:
                self._send_credit(conn, out)

    # --- data direction -----------------------------------------------------------------------------------

    def _data_packet(self, conn, parsed, out):
        if conn.job.config.lossy:
            self._contribution(conn, parsed, out)
            return
        h, payload = parsed.header, parsed.payload
        opcode = h["bth_opcode"]
        if opcode not in _WRITES:
            self.counters["passthrough_opcode"] += 1
            self._pass(parsed, out)
            return
        d = psn_distance(h["bth_psn"], conn.expected)
        if d > 0:
            self.counters["passthrough_gap"] += 1
            self._emit(deparse_frame({**h, "bth_psn": (h["bth_psn"] + GAP_PSN_SHIFT) % PSN_MODULUS}, payload),
                       out)
        elif d < 0:
            self._duplicate(conn, parsed, out)
        else:
            self._in_sequence(conn, parsed, out)

    def _in_sequence(self, conn, parsed, out):
        h, payload = parsed.header, parsed.payload
        job, cfg, opcode = conn.job, conn.job.config, h["bth_opcode"]
        first = opcode in _FIRST
        if first != (conn.slot is None):
            self.counters["passthrough_sequence"] += 1
            self._pass(parsed, out)
            return
        if first:
            header = AggHeader.unpack(payload)
            if (header is None or header.job != cfg.job or header.dtype != cfg.dtype
                    or header.msg_seq != conn.next_seq):
                self.counters["drop_bad_header"] += 1
                return
            k = header.msg_seq % cfg.message_slots
            slot = job.slots[k]
            in_window = (header.msg_seq - job.oldest) % MSG_SEQ_MODULUS < cfg.message_slots
            if not in_window or (slot.busy and slot.seq != header.msg_seq):
                self.counters["drop_no_credit"] += 1
                return
            index = 0
        else:
            k = conn.slot
            slot = job.slots[k]
            index = psn_distance(h["bth_psn"], slot.first_psn[conn.worker])
        if not self._length_ok(cfg, slot, index, h, payload):
            self.counters["drop_bad_length"] += 1
            return
        # contribute
        w = conn.worker
        if first:
            slot.busy, slot.seq = True, conn.next_seq
            slot.first_psn[w] = h["bth_psn"]
            conn.slot = k
        packet = slot.packets[index]
        packet.length = h["payload_len"]
        packet.headers[w] = h
        packet.payloads[w] = payload
        packet.bitmap |= 1 << w
        conn.expected = (conn.expected + 1) % PSN_MODULUS
        if opcode in _LAST:
            slot.count[w] = index + 1
            conn.slot = None
            conn.next_seq = (conn.next_seq + 1) % MSG_SEQ_MODULUS
        self.counters["aggregated"] += 1
        if packet.bitmap == job.full:
            packet.sum = self._sum(job, packet)
            for v in range(cfg.workers):
                self._emit(self._result(packet.headers[v], packet.payloads[v], packet.sum, index), out)
                job.connections[v].sent = packet.headers[v]["bth_psn"]
                self.counters["results_sent"] += 1
            # the contributions are no longer needed: the sum and the headers answer duplicates
            packet.payloads = [None] * cfg.workers

    @staticmethod
    def _length_ok(cfg, slot, index, h, payload):
        length = h["payload_len"]
        return (index < cfg.message_packets and h["bth_pad"] == 0 and length % _ELEMENT_ALIGN == 0
                and length <= cfg.mtu and len(payload) == length
                and slot.packets[index].length in (None, length))

    def _duplicate(self, conn, parsed, out):
        h, payload = parsed.header, parsed.payload
        job, w, psn = conn.job, conn.worker, h["bth_psn"]
        for slot in job.slots:
            if not slot.busy or slot.first_psn[w] is None:
                continue
            index = psn_distance(psn, slot.first_psn[w])
            count = slot.count[w]
            if 0 <= index and (index < count if count is not None
                               else psn_distance(psn, conn.expected) < 0):
                packet = slot.packets[index]
                if packet.sum is None:
                    self.counters["duplicates_dropped"] += 1
                elif h["payload_len"] != packet.length or len(payload) != packet.length:
                    self.counters["drop_bad_length"] += 1
                else:
                    self.counters["duplicates_answered"] += 1
                    self._emit(self._result(h, payload, packet.sum, index), out)
                return
        self.counters["passthrough_stale"] += 1
        self._pass(parsed, out)

    # --- the bounded-loss class ------------------------------------------------------------------------------

    def _contribution(self, conn, parsed, out):
        """A bound data frame of a bounded-loss job: aggregated into its message's slot by the message number
        of its aggregation header, whatever its PSN, if the message is open or may open."""
        h, payload = parsed.header, parsed.payload
        job, cfg, w = conn.job, conn.job.config, conn.worker
        if h["bth_opcode"] != _LOSSY_OPCODE:
            self.counters["passthrough_opcode"] += 1
            self._pass(parsed, out)
            return
        header = AggHeader.unpack(payload)
        if header is None or header.job != cfg.job or header.dtype != cfg.dtype:
            self.counters["drop_bad_header"] += 1
            return
        seq = header.msg_seq
        slot = job.slots[seq % cfg.message_slots]
        held = slot.holds(seq)
        if held and slot.bitmap >> w & 1:
            self.counters["duplicates_dropped"] += 1
            return
        if held and slot.state is SlotState.COMPLETE:
            self.counters["late"] += 1
            return
        if not held:
            d = msg_distance(seq, job.oldest)
            if d < 0:
                self.counters["late"] += 1
                return
            if d >= cfg.window:
                self.counters["drop_no_credit"] += 1
                return
        length = h["payload_len"]
        if not (h["bth_pad"] == 0 and length % _ELEMENT_ALIGN == 0 and length <= cfg.mtu and len(payload) == length
                and (not held or slot.length in (None, length))):
            self.counters["drop_bad_length"] += 1
            return
        if not held:
            self._open(job, seq)
        slot.length = length
        slot.headers[w] = h
        slot.payloads[w] = payload
        slot.bitmap |= 1 << w
        self.counters["aggregated"] += 1
        if slot.bitmap == job.full:
            self._complete(job, slot, out, at_deadline=False)

    def _open(self, job, seq):
        """Open message ``seq`` of the window, and every message of the window before it that has not opened
        (their packets are lost or on their way): each at the current clock, with no contribution."""
        for d in range(msg_distance(seq, job.oldest) + 1):
            m = (job.oldest + d) % MSG_SEQ_MODULUS
            slot = job.slots[m % job.config.message_slots]
            if not slot.holds(m):
                slot.open(m, self.now, job.config.workers)

    def _expire(self, now, out):
        """Move the clock to ``now``; complete every open message whose deadline has come, in the order of the
        deadlines, then of the jobs' configuration, then of the messages."""
        if now < self.now:
            raise ValueError(f"the clock goes back from {self.now} to {now}")
        self.now = now
        due = [(slot.opened + job.config.deadline_clocks, j, msg_distance(slot.seq, job.oldest), job, slot)
               for j, job in enumerate(self._lossy_jobs) for slot in job.slots
               if slot.state is SlotState.OPEN and slot.opened + job.config.deadline_clocks <= now]
        for *_, job, slot in sorted(due, key=lambda entry: entry[:3]):
            self._complete(job, slot, out, at_deadline=True)

    def _complete(self, job, slot, out, *, at_deadline):
        """The message in ``slot`` completes with the contributors it has: each worker's receiver gets the
        result (if there is any contributor), then the job's oldest completed messages are released."""
        contributors = slot.bitmap
        n = contributors.bit_count()
        if at_deadline:
            self.counters["deadline_completions"] += 1
        self.counters[contributors_counter(n)] += 1
        self.contributors[n] += 1
        slot.state = SlotState.COMPLETE
        if contributors:
            lowest = (contributors & -contributors).bit_length() - 1
            slot.sum = self._masked_sum(job, slot)
            slot.template, slot.template_head = slot.headers[lowest], slot.payloads[lowest][:AGG_HEADER_BYTES]
            for conn in job.connections:
                self._emit(self._lossy_result(conn, slot), out)
                self.counters["results_sent"] += 1
        slot.headers = slot.payloads = None
        while True:
            oldest = job.slots[job.oldest % job.config.message_slots]
            if not (oldest.holds(job.oldest) and oldest.state is SlotState.COMPLETE):
                return
            job.oldest = (job.oldest + 1) % MSG_SEQ_MODULUS
            for conn in job.connections:
                self._send_credit(conn, out)

    @staticmethod
    def _masked_sum(job, slot):
        """The tree sum of exactly the slot's contributors (an absent leaf passes its sibling through)."""
        element = np.dtype("<u4") if job.fmt.width == 32 else np.dtype("<u2")
        absent = np.zeros(slot.length // element.itemsize, dtype=element)
        contributions = np.stack([absent if p is None else np.frombuffer(p, dtype=element) for p in slot.payloads])
        mask = None
        if slot.bitmap != job.full:
            mask = np.array([slot.bitmap >> w & 1 for w in range(job.config.workers)], dtype=bool)
        return tree_sum(job.fmt, contributions, mask=mask, ftz=job.config.ftz).astype(element).tobytes()

    @staticmethod
    def _lossy_result(conn, slot):
        """The result of a completed message for worker ``conn.worker``'s receiver: the template, addressed
        from the worker's requester to its responder, with the connection's next PSN, the responder's R_Key
        and the contributor bitmap in the immediate."""
        cfg = conn.config
        conn.sent = (conn.sent + 1) % PSN_MODULUS
        vlan = cfg.requester_vlan
        header = {**slot.template, "eth_dst": conn.responder.mac, "eth_src": conn.requester.mac,
                  "vlan_valid": int(vlan is not None), "vlan_tci": vlan or 0, "ip_src": conn.requester.ip,
                  "ip_dst": conn.responder.ip, "bth_dest_qp": cfg.responder_qpn, "bth_psn": conn.sent,
                  "reth_rkey": cfg.responder_rkey, "immdt": slot.bitmap}
        return deparse_frame(header, slot.template_head + slot.sum[AGG_HEADER_BYTES:])

    def _result_request(self, conn, seq, out):
        """A receiver asks for the result of message ``seq`` again: answered from the slot while it holds it
        completed, ``RESULT_RESENDS`` times at most for one receiver; a message of the window that has not
        opened opens; anything else is stale."""
        self.counters["result_requests"] += 1
        job = conn.job
        slot = job.slots[seq % job.config.message_slots]
        if slot.holds(seq):
            if slot.state is SlotState.COMPLETE and slot.bitmap:
                w = conn.config.worker
                if slot.resends[w] < RESULT_RESENDS:
                    slot.resends[w] += 1
                    self._emit(self._lossy_result(conn, slot), out)
                    self.counters["results_resent"] += 1
                else:
                    self.counters["result_requests_refused"] += 1
        elif 0 <= msg_distance(seq, job.oldest) < job.config.window:
            self._open(job, seq)
        else:
            self.counters["result_requests_stale"] += 1

    # --- the sum --------------------------------------------------------------------------------------------

    @staticmethod
    def _sum(job, packet):
        element = np.dtype("<u4") if job.fmt.width == 32 else np.dtype("<u2")
        contributions = np.stack([np.frombuffer(p, dtype=element) for p in packet.payloads])
        return tree_sum(job.fmt, contributions, ftz=job.config.ftz).astype(element).tobytes()

    @staticmethod
    def _result(header, payload, total, index):
        """The packet ``header`` answered with the sum: its own aggregation header stays on a first packet."""
        if index == 0:
            total = payload[:AGG_HEADER_BYTES] + total[AGG_HEADER_BYTES:]
        return deparse_frame(header, total)


def config_from_registers(registers, build):
    """The :class:`SwitchConfig` that the register file ``registers`` (``netreduce.registers.RegisterFile``) of a
    build of parameters ``build`` holds: the inverse of ``netreduce.registers.switch_config_writes``, jobs in
    the order of their indices. Registers that no valid configuration holds are left out (docs, "In-band
    control plane"): a forwarding entry naming a port the build lacks, a job whose registers are not a valid
    ``JobConfig`` of the build, whose class is bounded-loss where the build has none (``bounded_loss``), whose id
    an enabled job of a lower index has, or whose workers do not each have
    an enabled connection that is valid (its ports the build's, its VLAN words untagged or tagged, its keys
    no lower connection's); a ``default_port`` the build lacks reads as 0."""
    r, ports, workers = registers, build["ports"], build["workers"]

    def place(c, side):
        vlan = r["connection", c, f"{side}_vlan"]
        if vlan and not vlan & 0x1000:
            raise ValueError("neither untagged nor tagged")
        port = r["connection", c, f"{side}_port"]
        if port >= ports:
            raise ValueError("no such port")
        return {f"{side}_mac": r["connection", c, f"{side}_mac"], f"{side}_ip": r["connection", c, f"{side}_ip"],
                f"{side}_port": port, f"{side}_vlan": vlan & 0xFFF if vlan else None}

    forwarding = {}
    for e in range(build["forwarding_entries"]):
        if r["forwarding", e, "enable"] and r["forwarding", e, "port"] < ports:
            forwarding.setdefault(r["forwarding", e, "mac"], r["forwarding", e, "port"])
    default_port = r["switch", 0, "default_port"]
    jobs, connections, keys, ids = [], [], set(), set()
    for j in range(build["jobs"]):
        if not r["job", j, "enable"]:
            continue
        if r["job", j, "traffic_class"] and not build.get("bounded_loss", True):
            continue        # a build without the bounded-loss class enables no job of it (its valid bit stays 0)
        if r["job", j, "id"] in ids:
            continue
        ids.add(r["job", j, "id"])
        lossy = {}
        if r["job", j, "traffic_class"]:
            lossy = {"traffic_class": JobClass.LOSSY, "deadline_clocks": r["job", j, "deadline_clocks"]}
        try:
            job = JobConfig(job=r["job", j, "id"], workers=r["job", j, "workers"], dtype=build["dtype"],
                            mtu=r["job", j, "mtu"], message_packets=build["message_packets"],
                            message_slots=build["message_slots"], ftz=build["ftz"], start_msg=r["job", j, "start_msg"],
                            **lossy)
            if job.workers > workers:
                raise ValueError("more workers than the build's")
            conns = []
            for w in range(job.workers):
                c = j * workers + w
                if not r["connection", c, "enable"]:
                    raise ValueError("a worker without a connection")
                conn = ConnectionConfig(job=job.job, worker=w, requester_qpn=r["connection", c, "requester_qpn"],
                                        responder_qpn=r["connection", c, "responder_qpn"],
                                        start_psn=r["connection", c, "start_psn"],
                                        responder_rkey=r["connection", c, "responder_rkey"] if lossy else None,
                                        **place(c, "requester"), **place(c, "responder"))
                conns.append(conn)
            new_keys = {("data", conn.requester_ip, conn.responder_qpn) for conn in conns} | \
                       {("ack", conn.responder_ip, conn.requester_qpn) for conn in conns}
            if len(new_keys) != 2 * len(conns) or new_keys & keys:
                raise ValueError("a connection key in use")
        except ValueError:
            continue
        jobs.append(job)
        connections += conns
        keys |= new_keys
    return SwitchConfig(mac=r["switch", 0, "mac"], ip=r["switch", 0, "ip"], control_port=r["switch", 0, "control_port"],
                        ports=ports, forwarding=forwarding, default_port=default_port if default_port < ports else 0,
                        max_frame=build["max_frame"], ipv6=build.get("ipv6", True),
                        bounded_loss=build.get("bounded_loss", True), jobs=jobs, connections=connections)
