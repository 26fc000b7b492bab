"""Golden model of the NetReduce switch, at packet level.

Written from docs/ARCHITECTURE.md ("Aggregation (the NetReduce switch)"), the RoCE v2 rules and IEEE 754
(through :func:`netreduce.sim.fp.tree_sum`), never from the RTL. Given the configuration and the frames
arriving on each port, in order, :meth:`SwitchModel.receive` returns the frames leaving, each with its
port, and keeps the counters. The RTL testbenches compare against it frame for frame and byte for byte; a
user runs it to predict what the hardware will do.

Frames are bytes without preamble and FCS, as a MAC delivers them. Parsing and deparsing are those of
:mod:`netreduce.sim.roce_model`.
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
)
from netreduce.sim.fp import get_format, tree_sum
from netreduce.sim.roce_model import deparse_frame, parse_frame, verdict_good
from netreduce.wire import (
    AGG_HEADER_BYTES,
    CONTROL_PORT,
    PSN_MODULUS,
    RC_WRITE_OPCODES,
    AethSyndrome,
    ControlType,
    psn_distance,
)

__all__ = ["JobConfig", "ConnectionConfig", "SwitchConfig", "SwitchModel", "COUNTERS", "GAP_PSN_SHIFT"]

# Every counter the switch keeps (docs/ARCHITECTURE.md, "Switch behaviour, per received frame").
COUNTERS = (
    "frames_in", "frames_out", "forwarded", "aggregated", "results_sent", "duplicates_answered",
    "duplicates_dropped", "passthrough_gap", "passthrough_stale", "passthrough_sequence",
    "passthrough_opcode", "drop_bad_icrc", "drop_bad_checksum", "drop_bad_header", "drop_no_credit",
    "drop_bad_length", "drop_control", "drop_oversize", "credits_sent", "credit_requests", "acks_seen",
)

_FIRST = {RC_WRITE_OPCODES["FIRST"], RC_WRITE_OPCODES["ONLY"], RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_LAST = {RC_WRITE_OPCODES["LAST"], RC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"], RC_WRITE_OPCODES["ONLY"],
         RC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]}
_WRITES = set(RC_WRITE_OPCODES.values())
_ACKNOWLEDGE = 0x11
# A packet after a gap goes on with its PSN this far ahead: the responder still sees a sequence error and
# NAKs, and a copy that a reordering network delivers late can never become the expected PSN (which would
# write a raw contribution into the receiver's memory).
GAP_PSN_SHIFT = 1 << 22
_ELEMENT_ALIGN = 4      # payload lengths are whole 32-bit words: one binary32 or two 16-bit elements


@dataclass(frozen=True)
class JobConfig:
    job: int
    workers: int
    dtype: str = "fp32"
    mtu: int = 1024
    message_packets: int = 4
    message_slots: int = 4
    ftz: bool = False

    def __post_init__(self):
        get_format(self.dtype)      # ValueError naming the formats (the names of wire.DTYPE_CODES)
        if not 0 <= self.job < 1 << 16:
            raise ValueError(f"job id {self.job} does not fit in 16 bits")
        for name in ("workers", "mtu", "message_packets", "message_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.mtu % _ELEMENT_ALIGN or self.mtu < AGG_HEADER_BYTES + _ELEMENT_ALIGN:
            raise ValueError(f"mtu {self.mtu} must be a multiple of 4 and at least {AGG_HEADER_BYTES + 4}")


@dataclass(frozen=True)
class ConnectionConfig:
    """Worker ``worker`` of ``job``: its requester (on the worker's host) writes to the responder (on the
    peer host). MACs and IPv4 addresses as strings or ints; QPNs 24 bits."""
    job: int
    worker: int
    requester_mac: object
    requester_ip: object
    requester_qpn: int
    responder_mac: object
    responder_ip: object
    responder_qpn: int
    start_psn: int = 0


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
        self.oldest = 0                         # the oldest message not yet released
        self.connections = [None] * config.workers
        self.full = (1 << config.workers) - 1


class _Connection:
    __slots__ = ("config", "job", "worker", "expected", "delivered", "next_seq", "slot")

    def __init__(self, config, job):
        self.config = config
        self.job = job
        self.worker = config.worker
        self.expected = config.start_psn % PSN_MODULUS
        self.delivered = (config.start_psn - 1) % PSN_MODULUS
        self.next_seq = 0
        self.slot = None        # the message slot of the message in progress, None between messages


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
        elif self._is_control(h, parsed.payload):
            self._control(h, parsed.payload, out)
        elif not h["roce"] or h["ip_version"] != 4:
            self._forward(parsed, out)
        else:
            key = (h["ip_src"], h["bth_dest_qp"])
            if h["bth_opcode"] == _ACKNOWLEDGE and key in self._ack:
                conn = self._ack[key]
                self._acknowledge(conn, h)
                self._forward(parsed, out)
                self._release(conn.job, out)
            elif key in self._data:
                self._data_packet(self._data[key], parsed, out)
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

    def _is_control(self, h, payload):
        return (h["ip_version"] == 4 and h["ip_dst"] == self._ip and h["ip_proto"] == 17
                and h["udp_dport"] == self.config.control_port and not h["roce"])

    def _control(self, h, frame_payload, out):
        # the parser puts a non-RoCE frame whole into its payload stream: the UDP payload follows 14
        # (+4 with a VLAN tag) + 20 + 8 bytes of headers
        start = 14 + 4 * h["vlan_valid"] + 20 + 8
        message = parse_control_payload(frame_payload[start:])
        conn = None
        if message is not None and message.type == ControlType.CREDIT_REQUEST:
            job = self.jobs.get(message.job)
            if job is not None and message.worker < job.config.workers:
                candidate = job.connections[message.worker]
                if ip_to_int(candidate.config.requester_ip) == h["ip_src"]:
                    conn = candidate
        if conn is None:
            self.counters["drop_control"] += 1
            return
        self.counters["credit_requests"] += 1
        self._send_credit(conn, out)

    def _send_credit(self, conn, out):
        job = conn.job
        allowed = job.oldest + job.config.message_slots - 1
        message = ControlMessage(ControlType.CREDIT, job.config.job, conn.worker, allowed & 0xFFFFFFFF)
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
        # only forward progress, and never past what the switch has let through in sequence
        last_contributed = (conn.expected - 1) % PSN_MODULUS
        if 0 < psn_distance(through, conn.delivered) and psn_distance(through, last_contributed) <= 0:
            conn.delivered = through

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
            job.oldest += 1
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
            in_window = header.msg_seq - job.oldest < cfg.message_slots
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
            conn.next_seq += 1
        self.counters["aggregated"] += 1
        if packet.bitmap == job.full:
            packet.sum = self._sum(job, packet)
            for v in range(cfg.workers):
                self._emit(self._result(packet.headers[v], packet.payloads[v], packet.sum, index), out)
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
