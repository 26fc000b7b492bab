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
"""

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from netreduce.host.protocol import (
    AggHeader,
    ControlMessage,
    build_control_frame,
    ip_to_int,
    mac_to_int,
    parse_control_payload,
    udp_payload,
)
from netreduce.registers import COUNTERS
from netreduce.sim.fp import get_format, tree_sum
from netreduce.sim.roce_model import deparse_frame, has_udp, parse_frame, verdict_good
from netreduce.wire import (
    AGG_HEADER_BYTES,
    CONTROL_PACKET,
    CONTROL_PORT,
    GAP_PSN_SHIFT,
    MSG_SEQ_MODULUS,
    PSN_MODULUS,
    RC_WRITE_OPCODES,
    AethSyndrome,
    ControlType,
    header_bytes,
    psn_distance,
)

__all__ = ["JobConfig", "ConnectionConfig", "SwitchConfig", "SwitchModel", "COUNTERS", "GAP_PSN_SHIFT"]

_FIRST = {RC_WRITE_OPCODES["FIRST"], RC_WRITE_OPCODES["ONLY"], RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_LAST = {RC_WRITE_OPCODES["LAST"], RC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"], RC_WRITE_OPCODES["ONLY"],
         RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_WRITES = set(RC_WRITE_OPCODES.values())
_ACKNOWLEDGE = 0x11
_ELEMENT_ALIGN = 4      # payload lengths are whole 32-bit words: one binary32 or two 16-bit elements
_CONTROL_UDP_LEN = 8 + header_bytes(CONTROL_PACKET)     # 20: a UDP length that holds the whole control message
_VID_MASK = 0xFFF


@dataclass(frozen=True)
class JobConfig:
    """A job of ``workers`` workers. ``message_slots`` K, a power of two, is the credit window; the job's
    first message is ``start_msg`` (its sequence numbers go on modulo 2^32)."""
    job: int
    workers: int
    dtype: str = "fp32"
    mtu: int = 1024
    message_packets: int = 4
    message_slots: int = 4
    ftz: bool = False
    start_msg: int = 0

    def __post_init__(self):
        get_format(self.dtype)      # ValueError naming the formats (the names of wire.DTYPE_CODES)
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


@dataclass(frozen=True)
class ConnectionConfig:
    """Worker ``worker`` of ``job``: its requester (on the worker's host) writes to the responder (on the
    peer host). MACs and IPv4 addresses as strings or ints; QPNs 24 bits. ``requester_port`` and
    ``responder_port`` are the switch ports each side's frames arrive on, ``requester_vlan`` and
    ``responder_vlan`` ``None`` (untagged frames) or the 12-bit VLAN id each side's frames are tagged with:
    with the MACs and IPv4 addresses they bind the connection's frames to where its hosts are."""
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

    def __post_init__(self):
        for side in ("requester", "responder"):
            vlan = getattr(self, f"{side}_vlan")
            if vlan is not None and not 0 <= vlan <= _VID_MASK:
                raise ValueError(f"{side}_vlan {vlan} is not a 12-bit VLAN id (or None: untagged)")


@dataclass
class SwitchConfig:
    mac: object = "02:4e:52:00:00:01"
    ip: object = "10.0.255.1"
    control_port: int = CONTROL_PORT
    ports: int = 1
    forwarding: dict = field(default_factory=dict)     # destination MAC -> port
    default_port: int = 0
    max_frame: int = 9216                              # longest payload stream (whole frame if not RoCE)
    jobs: list = field(default_factory=list)           # JobConfig
    connections: list = field(default_factory=list)    # ConnectionConfig

    def port_of(self, mac):
        return self._forwarding.get(mac, self.default_port)

    def __post_init__(self):
        self._forwarding = {mac_to_int(mac): port for mac, port in self.forwarding.items()}
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


class _Job:
    def __init__(self, config):
        self.config = config
        self.fmt = get_format(config.dtype)
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
        """A data frame comes from the requester's place and goes to the responder."""
        return self.requester.is_source(port, h) and self.responder.is_destination(h)

    def ack_bound(self, port, h):
        """An ACK or NAK comes from the responder's place and goes to the requester."""
        return self.responder.is_source(port, h) and self.requester.is_destination(h)


class _Place:
    """A host as the switch knows it: MAC, IPv4 address, the port it is on and its VLAN."""
    __slots__ = ("mac", "ip", "port", "vlan")

    def __init__(self, mac, ip, port, vlan):
        self.mac, self.ip, self.port, self.vlan = mac_to_int(mac), ip_to_int(ip), port, vlan

    def is_source(self, port, h):
        """The frame arrived from here: on this port, from this MAC, in this VLAN (the key or the control
        check has already matched the source IP)."""
        if port != self.port or h["eth_src"] != self.mac:
            return False
        if self.vlan is None:
            return not h["vlan_valid"]
        return bool(h["vlan_valid"]) and h["vlan_tci"] & _VID_MASK == self.vlan

    def is_destination(self, h):
        """The frame is addressed here: destination MAC and IPv4 address."""
        return h["eth_dst"] == self.mac and h["ip_dst"] == self.ip


class SwitchModel:
    """The switch: ``receive(port, frame)`` returns ``[(port, frame), ...]``; ``counters`` counts."""

    def __init__(self, config):
        self.config = config
        self.counters = Counter(dict.fromkeys(COUNTERS, 0))
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

    # --- entry point ----------------------------------------------------------------------------------

    def receive(self, port, frame):
        self.counters["frames_in"] += 1
        out = []
        parsed = parse_frame(frame)
        h = parsed.header
        if h["roce"] and not verdict_good(h, parsed.verdict):
            self.counters["drop_bad_icrc" if not parsed.verdict["icrc_ok"] else "drop_bad_checksum"] += 1
        elif len(parsed.payload) > self.config.max_frame:
            self.counters["drop_oversize"] += 1
        elif h["eth_src"] == self._mac or (h["ip_version"] == 4 and h["ip_src"] == self._ip):
            self.counters["drop_spoofed"] += 1          # someone speaking in the switch's name
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

    # --- control packets ------------------------------------------------------------------------------

    def _is_control(self, h):
        """IPv4 UDP (a decoded UDP header: not a fragment), not RoCE, to the control port."""
        return (h["ip_version"] == 4 and has_udp(h) and not h["roce"]
                and h["udp_dport"] == self.config.control_port)

    def _control(self, port, h, frame_payload, out):
        """A control packet: only a CREDIT_REQUEST to the switch from the requester of the worker it names
        is answered; nothing is forwarded."""
        conn = None
        if h["ip_dst"] == self._ip and h["udp_len"] >= _CONTROL_UDP_LEN:
            # the parser puts a non-RoCE frame whole into its payload stream; the message ends where the UDP
            # length says, and a frame too short to hold it holds none
            message = parse_control_payload(udp_payload(frame_payload, h))
            if message is not None and message.type == ControlType.CREDIT_REQUEST:
                job = self.jobs.get(message.job)
                if job is not None and message.worker < job.config.workers:
                    candidate = job.connections[message.worker]
                    if h["ip_src"] == candidate.requester.ip and candidate.requester.is_source(port, h):
                        conn = candidate
        if conn is None:
            self.counters["drop_control"] += 1
            return
        self.counters["credit_requests"] += 1
        self._send_credit(conn, out)

    def _send_credit(self, conn, out):
        job = conn.job
        allowed = (job.oldest + job.config.message_slots - 1) % MSG_SEQ_MODULUS
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
        """Release the job's oldest messages while every worker's receiver has them all."""
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
