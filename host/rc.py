"""RoCE v2 Reliable Connection endpoints for RDMA WRITE, as pure state machines with explicit time.

Written from the InfiniBand Architecture Specification vol. 1, 9.7 "Reliable service" (requester and
responder behaviour: PSNs, ACK coalescing, duplicates, NAKs, retries; the AETH syndrome encoding of
9.7.5.2.8) and its Annex A17 "RoCEv2". Only RDMA WRITE is supported (FIRST, MIDDLE, LAST, ONLY,
LAST and ONLY with immediate) and only IPv4 without VLAN.

Nothing here has a thread, a task or an event loop: the caller owns time, given as an integer ``now`` in
nanoseconds, and moves frames (``bytes``, complete Ethernet frames without FCS) between the endpoints. A
Python discrete-event loop and a cocotb testbench drive them alike. Frames are built from a header-record
template with :func:`netreduce.sim.roce_model.deparse_frame` and read with
:func:`netreduce.sim.roce_model.parse_frame` (no scapy on the hot path).

Interface
---------
``Endpoint(mac, ip, qpn, udp_sport=0xC000)``
    One side of a connection: MAC (int, 48 bits), IPv4 address (dotted string), QP number (24 bits) and the
    UDP source port of every frame this side sends (to port 4791) with ``source_port=SourcePort.FIXED``.

``SourcePort``: ``FIXED`` (the default), ``PER_QP``, ``PER_PACKET`` (or their values ``"fixed"``,
``"per_qp"``, ``"per_packet"``): where the UDP source port of a QP's frames comes from (see "Source port").
``roce_udp_sport(lqpn, rqpn, psn=None)``, ``flow_label(lqpn, rqpn)``, ``flow_label_to_udp_sport(label)``.

``Memory()``: registered memory regions.
    ``register(va, size, rkey, *, remote_write=True, fill=0) -> Region``, ``deregister(rkey)``,
    ``region(rkey)``, ``read(va, n) -> bytes``. Regions may not overlap and each has its own R_Key. Only a
    responder writes into it.

``RcRequester(local, remote, *, start_psn=0, mtu=1024, max_outstanding=128, timeout_ns=100_000,
retry_limit=7, rnr_retry=7, ack_req_every=0, dscp=0, ecn=0, pkey=0xFFFF, ttl=64, source_port=SourcePort.FIXED)``
    - ``post_write(data, *, va, rkey, immediate=None, dscp=None) -> int``: queue an RDMA WRITE; returns its
      work request id (0, 1, 2, ...). ``dscp``: the DSCP of this work request's packets (retransmissions
      included) instead of the QP's.
    - ``dscp``, ``source_port``: the QP's DSCP and source-port rule, settable; they apply to the frames
      built from then on.
    - ``poll(now) -> list[bytes]``: handle an expired retransmission timer, then return the frames to send
      now (new packets and go-back-N retransmissions, in PSN order, within the window). Call it after
      ``post_write``, after ``receive`` and at ``next_timer()``; calling it more often is harmless.
    - ``receive(frame, now, parsed=None) -> None``: an ACK/NAK from the responder (``parsed``: the
      frame's :func:`~netreduce.sim.roce_model.parse_frame` result when the caller has it, to parse once).
      Frames with a bad ICRC or IPv4 checksum, not from the remote address to the local address and QP, or
      with another P_Key or transport version are dropped and counted (``stats["dropped"]``); other opcodes
      are counted (``stats["ignored"]``).
    - ``next_timer() -> int | None``: the time at which ``poll`` must be called (retransmission timeout or
      the end of an RNR wait); ``None`` when nothing is outstanding or in the error state.
    - ``can_send`` (property): whether ``poll`` would send a packet now (ignoring timers).
    - ``idle`` (property): no work request is pending (all completed or failed).
    - ``una`` (oldest unacknowledged PSN), ``nxt`` (next PSN to transmit), ``sent_hi`` (one past the
      furthest PSN transmitted), ``outstanding`` (property: ``sent_hi - una`` modulo 2^24): read only.
    - ``completions``: deque of completed work request ids, in order (the caller drains it).
    - ``failed``: work request ids flushed by the error state (in order), ``error``: ``None`` or the reason.
    - ``stats``: ``packets_sent`` (all, retransmissions included), ``retransmitted_packets``,
      ``timeouts``, ``naks_received`` (sequence error, RNR and fatal), ``acks_received``,
      ``stale_responses`` (ACK/NAK outside the outstanding window, or an ACK with no progress),
      ``duplicate_naks``, ``rnr_naks_received``, ``dropped``, ``ignored``.

``RcResponder(local, remote, *, memory, start_psn=0, mtu=1024, ack_coalesce=0, dscp=0, ecn=0,
pkey=0xFFFF, ttl=64, source_port=SourcePort.FIXED)``
    - ``receive(frame, now, parsed=None) -> list[bytes]``: a request frame; returns the ACK/NAK frames to
      send back (``parsed`` as for the requester).
    - ``completions``: deque of delivered messages ``(va, length, immediate or None)``, in order.
    - ``error``: ``None`` or the reason once the QP is in the error state (after a fatal NAK).
    - ``dscp``, ``source_port``: as for the requester (for its ACKs and NAKs).
    - ``expected_psn``, ``msn``; ``stats``: ``packets_received`` (every frame offered),
      ``packets_accepted``, ``messages_delivered``, ``bytes_written``, ``acks_sent``, ``naks_sent``
      (all codes), ``sequence_naks``, ``duplicates``, ``out_of_sequence``, ``dropped_bad_frame``,
      ``dropped_not_for_qp``, ``dropped_opcode``, ``dropped_error_state``.

Source port
-----------
RoCE v2 puts a flow's entropy in the UDP source port, which every ECMP hash reads along with the
addresses. ``FIXED``: ``local.udp_sport`` on every frame (as before; what the tests' hand-made frames
expect). ``PER_QP``: the port Linux gives an RC QP with no flow label (``rdma_get_udp_sport``, which NIC
drivers share): ``flow_label(lqpn, rqpn)`` folds the 48-bit product of the two QPNs to 20 bits (``v ^= v >>
20; v ^= v >> 40``), and ``flow_label_to_udp_sport`` folds those to 14 bits (low 14 bits XOR the high 6)
in 0xC000..0xFFFF. It is stable for the QP and the same on both sides of the connection (ACKs follow the
requests' path); the addresses are left out as Linux leaves them out, since the 5-tuple hash has them
already. ``PER_PACKET``: the flow label of the QPs XOR the PSN's Fibonacci hash (the high 20 bits of
``psn * 0x9E3779B1`` modulo 2^32), folded the same way: a new port, so a new path, per packet, and the
same one when a PSN is sent again. It is meant for traffic whose packets do not depend on their order (the
bounded-loss class, sprayed across paths): on RC, packets that overtake each other cost go-back-N.

PSNs are 24-bit and wrap; two PSNs compare by their distance modulo 2^24, "ahead" meaning a distance below
2^23. The requester keeps at most ``max_outstanding`` (< 2^23) unacknowledged packets.

Rules
-----
Requester. A WRITE of ``n`` bytes is ``max(1, ceil(n / mtu))`` packets; every packet but the last carries
exactly ``mtu`` bytes. FIRST/ONLY carry the RETH (va, rkey, total length), LAST/ONLY carry ImmDt when the
write has an immediate; payloads are padded to 4 bytes (BTH pad count). AckReq is set on the last packet of
each message, on every ``ack_req_every``-th packet of a message (0: never), and on the packet that fills
the window (see below). An ACK with PSN ``p`` acknowledges every PSN up to ``p``; a work request completes
when its last packet is acknowledged. A sequence-error NAK (0x60) with PSN ``p`` acknowledges everything
before ``p`` and sends the requester back to ``p`` (go-back-N): packets are rebuilt with the opcodes of
their place in the message (MIDDLE/LAST when resuming inside one, a FIRST/ONLY carries its RETH again).
Every go-back (NAK or timeout) counts one retry; any acknowledgement progress (an ACK, or the implicit
acknowledgement of a NAK) resets the count to 0 first; a retry beyond ``retry_limit`` puts the QP into
the error state. The retransmission timer runs while packets are unacknowledged and restarts on the first
packet sent with nothing outstanding, on every progress and on every go-back; when it expires
(``timeout_ns`` without progress) the requester goes back to the oldest unacknowledged packet. NAK
invalid request (0x61), remote access error (0x62), remote operational error (0x63) and any other NAK
code acknowledge everything before their PSN too, then put the QP in the error state: nothing is sent any
more, the pending work requests move to ``failed``. A NAK whose PSN is not outstanding (before the oldest
unacknowledged PSN, or never sent) is stale and ignored, whatever its code; so is an ACK outside
``[oldest unacknowledged, last sent]``. AETH syndromes with the reserved bits 7..5 = 010 or 1xx are
ignored (``ignored``).

Responder. The expected PSN and the MSN start at ``start_psn`` and 0. With ``d = (psn - expected) mod
2^24``: ``d = 0`` (in sequence): the opcode must fit the message state (FIRST/ONLY between messages,
MIDDLE/LAST inside one), else NAK invalid request; the RETH's R_Key and range must fall in a region that
allows remote writes, else NAK remote access error; lengths must follow the segmentation rule above and
add up to the RETH's DMA length, else NAK invalid request. Then the payload is written at ``va + offset``,
the expected PSN advances, a last packet increments the MSN and delivers the message. An ACK (PSN of this
packet, the MSN, syndrome 0x1F) is sent when AckReq is set or when ``ack_coalesce`` (> 0) packets were
accepted since the last ACK. ``0 < d < 2^23`` (ahead): one sequence-error NAK (PSN = expected PSN, the
MSN) per gap, i.e. none again until an in-sequence packet has been accepted; nothing written. ``d >=
2^23`` (behind): a duplicate, never written or delivered again; answered by an ACK with the last
in-sequence PSN (expected - 1) and the current MSN, whatever its AckReq (IBA C9-105).

Choices the IBA leaves open (or that this model makes)
------------------------------------------------------
- Sequence-error NAKs count as retries like timeouts (progress resets the count first); this bounds a
  NAK/resend loop that never progresses.
- A sequence-error NAK whose PSN is the one the requester last went back to (by NAK or timeout) with no
  progress since is a duplicate and ignored (``duplicate_naks``): the resend it asks for is under way, and
  the timer covers its loss. A responder sends one NAK per gap, so a second NAK with the same PSN can only
  be a copy or a late one.
- The requester sets AckReq on the packet that fills the window, so that a message longer than
  ``max_outstanding`` packets cannot stall waiting for the ACK of its last packet.
- An ACK with the PSN just before the oldest unacknowledged one (no progress) neither restarts the timer
  nor resets the retry count. The ACK's credit count and the MSN of ACKs and NAKs are not used by the
  requester (end-to-end credits concern SEND only; completion follows from the PSN).
- RNR NAK (0x20-0x3F, never sent by this responder): acknowledges everything before its PSN, then the
  requester waits the time its timer field encodes (the IBA's RNR timer encoding, ``RNR_TIMER_NS``) and
  resends from the PSN; ``rnr_retry`` such NAKs in a row without progress are allowed (7: no limit); the
  transport timer is paused meanwhile.
- Zero-length writes: the R_Key and VA are not checked (IBA C9-88); the message is still delivered.
- A fatal NAK (0x61, 0x62) puts the responder's QP in the error state too: later frames are dropped
  (``dropped_error_state``), nothing is acknowledged.
- Frames are dropped (counted) when: not RoCE v2 over IPv4, bad ICRC or IPv4 checksum, IP source or
  destination not the connection's, destination QP not the local QPN, P_Key (low 15 bits) different,
  transport version not 0. MAC addresses and the UDP source port are not checked. At the responder, RC
  opcodes other than requests (responses, ACKs) and non-RC opcodes are dropped (``dropped_opcode``); RC
  SEND, READ and atomic requests go through the PSN checks and, in sequence, are answered by NAK invalid
  request (this QP supports RDMA WRITE only).
- The IPv4 header has DF set, identification 0, TTL ``ttl``; the UDP checksum is 0.
"""

import enum
import ipaddress
from collections import deque
from dataclasses import dataclass

from netreduce.sim.roce_model import deparse_frame, empty_header, parse_frame
from netreduce.wire import ETHERTYPE_IPV4, ROCE_UDP_PORT

__all__ = [
    "Endpoint", "Memory", "Region", "RcRequester", "RcResponder", "SourcePort", "roce_udp_sport", "flow_label",
    "flow_label_to_udp_sport",
    "PSN_MOD", "psn_add", "psn_distance",
    "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_LAST_IMM", "RDMA_WRITE_ONLY",
    "RDMA_WRITE_ONLY_IMM", "ACKNOWLEDGE", "ACK_SYNDROME", "NAK_SEQUENCE_ERROR", "NAK_INVALID_REQUEST",
    "NAK_REMOTE_ACCESS_ERROR", "NAK_REMOTE_OPERATIONAL_ERROR", "RNR_TIMER_NS",
]

PSN_MOD = 1 << 24
_PSN_MASK = PSN_MOD - 1
_PSN_HALF = 1 << 23

# RC opcodes (IBA table 38)
RDMA_WRITE_FIRST = 0x06
RDMA_WRITE_MIDDLE = 0x07
RDMA_WRITE_LAST = 0x08
RDMA_WRITE_LAST_IMM = 0x09
RDMA_WRITE_ONLY = 0x0A
RDMA_WRITE_ONLY_IMM = 0x0B
ACKNOWLEDGE = 0x11
_WRITE_OPCODES = frozenset(range(RDMA_WRITE_FIRST, RDMA_WRITE_ONLY_IMM + 1))
_FIRST_OPCODES = frozenset((RDMA_WRITE_FIRST, RDMA_WRITE_ONLY, RDMA_WRITE_ONLY_IMM))
_LAST_OPCODES = frozenset((RDMA_WRITE_LAST, RDMA_WRITE_LAST_IMM, RDMA_WRITE_ONLY, RDMA_WRITE_ONLY_IMM))
# RC request opcodes other than WRITE: SEND*, READ request, atomics, SEND with invalidate
_OTHER_REQUESTS = frozenset((0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x0C, 0x13, 0x14, 0x16, 0x17))

# AETH syndromes (IBA 9.7.5.2.8): bits 7..5 = 000 ACK (bits 4..0 credits, 0x1F: no credit limit),
# 001 RNR NAK (bits 4..0 timer), 011 NAK (bits 4..0 code)
ACK_SYNDROME = 0x1F
NAK_SEQUENCE_ERROR = 0x60
NAK_INVALID_REQUEST = 0x61
NAK_REMOTE_ACCESS_ERROR = 0x62
NAK_REMOTE_OPERATIONAL_ERROR = 0x63

# RNR NAK timer field -> minimum wait (the IBA's RNR timer encoding: 0 is 655.36 ms), in nanoseconds
RNR_TIMER_NS = tuple(int(round(ms * 1_000_000)) for ms in (
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
    2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76,
    327.68, 491.52))

_HEADERS = 20 + 8 + 12          # IPv4, UDP, BTH
_ICRC = 4


def psn_add(psn, n):
    """``psn + n`` modulo 2^24."""
    return (psn + n) & _PSN_MASK


def psn_distance(a, b):
    """``(a - b) mod 2^24``: how far ``a`` is ahead of ``b`` (ahead when below 2^23)."""
    return (a - b) & _PSN_MASK


def _check_int(name, value, bits):
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise ValueError(f"{name} must be an integer in 0..{(1 << bits) - 1}, not {value!r}")
    return value


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection: MAC (48-bit int), IPv4 (dotted), QPN (24 bits), UDP source port."""
    mac: int
    ip: str
    qpn: int
    udp_sport: int = 0xC000

    def __post_init__(self):
        _check_int("mac", self.mac, 48)
        _check_int("qpn", self.qpn, 24)
        _check_int("udp_sport", self.udp_sport, 16)
        ipaddress.IPv4Address(self.ip)     # raises on a bad address

    @property
    def ip_int(self):
        return int(ipaddress.IPv4Address(self.ip))


# --- source port -----------------------------------------------------------------------------------------

class SourcePort(enum.Enum):
    """Where the UDP source port of a QP's frames comes from (module docstring, "Source port")."""
    FIXED = "fixed"
    PER_QP = "per_qp"
    PER_PACKET = "per_packet"


_FLOW_LABEL_MASK = (1 << 20) - 1
_ENTROPY_PORT_MIN = 0xC000


def flow_label(lqpn, rqpn):
    """Linux's ``rdma_calc_flow_label``: the 20-bit flow label of a connection between QPNs ``lqpn`` and
    ``rqpn`` (symmetric in the two)."""
    v = lqpn * rqpn
    v ^= v >> 20
    v ^= v >> 40
    return v & _FLOW_LABEL_MASK


def flow_label_to_udp_sport(label):
    """Linux's ``rdma_flow_label_to_udp_sport``: a 20-bit flow label folded into 0xC000..0xFFFF."""
    low = (label & 0x3FFF) ^ ((label & 0xFC000) >> 14)
    return low | _ENTROPY_PORT_MIN


def roce_udp_sport(lqpn, rqpn, psn=None):
    """The UDP source port of a connection between QPNs ``lqpn`` and ``rqpn``: per QP, or with ``psn`` the
    port of that packet (module docstring, "Source port")."""
    label = flow_label(lqpn, rqpn)
    if psn is not None:
        label ^= ((psn * 0x9E3779B1) & 0xFFFFFFFF) >> 12
    return flow_label_to_udp_sport(label)


# --- memory ----------------------------------------------------------------------------------------------

@dataclass(eq=False)
class Region:
    """A registered memory region: ``[va, va + size)`` under ``rkey``."""
    va: int
    size: int
    rkey: int
    remote_write: bool
    data: bytearray

    def covers(self, va, length):
        return self.va <= va and va + length <= self.va + self.size


class Memory:
    """Registered memory regions of a responder (non-overlapping, one R_Key each)."""

    def __init__(self):
        self._regions = {}

    def register(self, va, size, rkey, *, remote_write=True, fill=0):
        _check_int("va", va, 64)
        _check_int("rkey", rkey, 32)
        if size < 0 or va + size > 1 << 64:
            raise ValueError(f"bad region size {size}")
        if rkey in self._regions:
            raise ValueError(f"R_Key 0x{rkey:08x} is already registered")
        for other in self._regions.values():
            if va < other.va + other.size and other.va < va + size:
                raise ValueError(f"region [0x{va:x}, +{size}) overlaps the one of R_Key 0x{other.rkey:08x}")
        region = Region(va, size, rkey, bool(remote_write), bytearray([fill]) * size)
        self._regions[rkey] = region
        return region

    def deregister(self, rkey):
        del self._regions[rkey]

    def region(self, rkey):
        """The region of ``rkey``, or ``None``."""
        return self._regions.get(rkey)

    def read(self, va, n):
        """``n`` bytes at ``va``, from the region that holds all of them (``ValueError`` if none does)."""
        for region in self._regions.values():
            if region.covers(va, n):
                start = va - region.va
                return bytes(region.data[start:start + n])
        raise ValueError(f"no registered region holds [0x{va:x}, +{n})")

    def writable(self, rkey, va, length):
        """Whether a remote write of ``length`` bytes at ``va`` under ``rkey`` is allowed."""
        region = self._regions.get(rkey)
        return region is not None and region.remote_write and region.covers(va, length)

    def _write(self, rkey, va, data):
        region = self._regions[rkey]
        start = va - region.va
        region.data[start:start + len(data)] = data


# --- frames ----------------------------------------------------------------------------------------------

def checked_write(data, *, va, rkey, immediate, dscp):
    """An RDMA WRITE work request's fields checked (``ValueError`` naming the first that does not fit);
    returns ``data`` as bytes. Shared by the RC and UC requesters."""
    data = bytes(data)
    _check_int("va", va, 64)
    _check_int("rkey", rkey, 32)
    _check_int("dma length", len(data), 32)
    if immediate is not None:
        _check_int("immediate", immediate, 32)
    if dscp is not None:
        _check_int("dscp", dscp, 6)
    return data


def _template(local, remote, *, dscp, ecn, pkey, ttl):
    _check_int("dscp", dscp, 6)
    _check_int("ecn", ecn, 2)
    _check_int("pkey", pkey, 16)
    _check_int("ttl", ttl, 8)
    h = empty_header()
    h.update(roce=1, eth_dst=remote.mac, eth_src=local.mac, ethertype=ETHERTYPE_IPV4, ip_version=4,
             ip_dscp=dscp, ip_ecn=ecn, ip_flags_frag=0x4000, ip_ttl=ttl, ip_proto=17,
             ip_src=local.ip_int, ip_dst=remote.ip_int, udp_sport=local.udp_sport, udp_dport=ROCE_UDP_PORT,
             bth_pkey=pkey, bth_dest_qp=remote.qpn)
    return h


def _build(template, opcode, psn, payload=b"", *, ack_req=0, reth=None, immdt=None, aeth=None, dscp=None,
           sport=None):
    h = template.copy()
    if dscp is not None:
        h["ip_dscp"] = dscp
    if sport is not None:
        h["udp_sport"] = sport
    ext = 0
    h["bth_opcode"] = opcode
    h["bth_psn"] = psn
    h["bth_ack_req"] = ack_req
    if reth is not None:
        h["has_reth"] = 1
        h["reth_va"], h["reth_rkey"], h["reth_dma_len"] = reth
        ext += 16
    if aeth is not None:
        h["has_aeth"] = 1
        h["aeth_syndrome"], h["aeth_msn"] = aeth
        ext += 4
    if immdt is not None:
        h["has_immdt"] = 1
        h["immdt"] = immdt
        ext += 4
    pad = -len(payload) & 3
    if pad:
        payload = payload + bytes(pad)
    h["bth_pad"] = pad
    ip_len = _HEADERS + ext + len(payload) + _ICRC
    h["ip_len"] = ip_len
    h["udp_len"] = ip_len - 20
    return deparse_frame(h, payload)


class _Sender:
    """What the requester and the responder share: the frame template, with the QP's DSCP and source port."""

    def _init_sender(self, local, remote, *, dscp, ecn, pkey, ttl, source_port):
        self.local, self.remote = local, remote
        self._template = _template(local, remote, dscp=dscp, ecn=ecn, pkey=pkey, ttl=ttl)
        self.source_port = source_port

    @property
    def dscp(self):
        """The DSCP of this QP's frames (a work request posted with its own overrides it)."""
        return self._template["ip_dscp"]

    @dscp.setter
    def dscp(self, value):
        self._template["ip_dscp"] = _check_int("dscp", value, 6)

    @property
    def source_port(self):
        """The :class:`SourcePort` rule of this QP's frames."""
        return self._source_port

    @source_port.setter
    def source_port(self, rule):
        rule = SourcePort(rule)
        self._source_port = rule
        self._template["udp_sport"] = (self.local.udp_sport if rule is SourcePort.FIXED
                                       else roce_udp_sport(self.local.qpn, self.remote.qpn))

    def _frame(self, opcode, psn, payload=b"", **fields):
        if self._source_port is SourcePort.PER_PACKET:
            fields["sport"] = roce_udp_sport(self.local.qpn, self.remote.qpn, psn)
        return _build(self._template, opcode, psn, payload, **fields)


class _Filter:
    """Which received frames belong to a connection (see the module docstring)."""

    def __init__(self, local, remote, pkey):
        self.src = remote.ip_int
        self.dst = local.ip_int
        self.qpn = local.qpn
        self.pkey = pkey & 0x7FFF

    def accept(self, frame, parsed=None):
        """``(header, payload)`` of a frame for this connection, or a string saying why it is dropped."""
        if parsed is None:
            parsed = parse_frame(frame)
        h = parsed.header
        if not h["roce"] or h["ip_version"] != 4:
            return "not_for_qp"
        if not parsed.verdict["icrc_ok"] or not parsed.verdict["ipv4_csum_ok"]:
            return "bad_frame"
        if (h["ip_src"] != self.src or h["ip_dst"] != self.dst or h["bth_dest_qp"] != self.qpn
                or h["bth_pkey"] & 0x7FFF != self.pkey or h["bth_tver"] != 0):
            return "not_for_qp"
        return h, parsed.payload[:h["payload_len"]]


# --- requester -------------------------------------------------------------------------------------------

class _WorkRequest:
    __slots__ = ("wr_id", "data", "va", "rkey", "immediate", "first_psn", "npkts", "dscp")

    def __init__(self, wr_id, data, va, rkey, immediate, first_psn, npkts, dscp):
        self.wr_id = wr_id
        self.data = data
        self.va = va
        self.rkey = rkey
        self.immediate = immediate
        self.first_psn = first_psn
        self.npkts = npkts
        self.dscp = dscp


class RcRequester(_Sender):
    """The sending side of an RC connection (RDMA WRITE), driven by ``poll``/``receive`` with explicit time."""

    def __init__(self, local, remote, *, start_psn=0, mtu=1024, max_outstanding=128, timeout_ns=100_000,
                 retry_limit=7, rnr_retry=7, ack_req_every=0, dscp=0, ecn=0, pkey=0xFFFF, ttl=64,
                 source_port=SourcePort.FIXED):
        _check_int("start_psn", start_psn, 24)
        if not isinstance(mtu, int) or mtu <= 0 or mtu % 4:
            raise ValueError(f"mtu must be a positive multiple of 4, not {mtu!r}")
        if not 1 <= max_outstanding < _PSN_HALF:
            raise ValueError(f"max_outstanding must be in 1..2^23-1, not {max_outstanding!r}")
        if timeout_ns <= 0 or retry_limit < 0 or rnr_retry < 0 or ack_req_every < 0:
            raise ValueError("timeout_ns must be positive; retry_limit, rnr_retry, ack_req_every >= 0")
        self._init_sender(local, remote, dscp=dscp, ecn=ecn, pkey=pkey, ttl=ttl, source_port=source_port)
        self.mtu = mtu
        self.max_outstanding = max_outstanding
        self.timeout_ns = timeout_ns
        self.retry_limit = retry_limit
        self.rnr_retry = rnr_retry
        self.ack_req_every = ack_req_every
        self._filter = _Filter(local, remote, pkey)
        self.completions = deque()
        self.failed = []
        self.error = None
        self.stats = dict.fromkeys((
            "packets_sent", "retransmitted_packets", "timeouts", "naks_received", "acks_received",
            "stale_responses", "duplicate_naks", "rnr_naks_received", "dropped", "ignored"), 0)
        self._sq = deque()              # work requests not completed, in PSN order
        self._next_wr_id = 0
        self._alloc = start_psn         # PSN of the next posted work request's first packet
        self.una = start_psn            # oldest unacknowledged PSN
        self.nxt = start_psn            # next PSN to transmit
        self.sent_hi = start_psn        # one past the furthest PSN ever transmitted
        self._cur = (0, 0)              # (index in _sq, packet index) of nxt
        self._timer_start = None        # running retransmission timer, or None
        self._retries = 0
        self._rnr_count = 0
        self._rnr_until = None
        self._retry_psn = None          # PSN of the last go-back with no progress since

    # -- posting ------------------------------------------------------------------------------------------

    def post_write(self, data, *, va, rkey, immediate=None, dscp=None):
        """Queue an RDMA WRITE of ``data`` to ``va`` under ``rkey``; returns the work request id. ``dscp``:
        the DSCP of its packets, instead of the QP's."""
        data = checked_write(data, va=va, rkey=rkey, immediate=immediate, dscp=dscp)
        wr_id = self._next_wr_id
        self._next_wr_id += 1
        if self.error is not None:
            self.failed.append(wr_id)
            return wr_id
        npkts = max(1, -(-len(data) // self.mtu))
        queued = psn_distance(self._alloc, self._sq[0].first_psn) if self._sq else 0
        if queued + npkts >= _PSN_HALF:
            raise ValueError("send queue full: more than 2^23 packets would be pending")
        self._sq.append(_WorkRequest(wr_id, data, va, rkey, immediate, self._alloc, npkts, dscp))
        self._alloc = psn_add(self._alloc, npkts)
        return wr_id

    # -- state ----------------------------------------------------------------------------------------------

    @property
    def outstanding(self):
        """Packets transmitted and not yet acknowledged."""
        return psn_distance(self.sent_hi, self.una)

    @property
    def idle(self):
        return not self._sq

    @property
    def can_send(self):
        return (self.error is None and self._rnr_until is None and self._cur[0] < len(self._sq)
                and psn_distance(self.nxt, self.una) < self.max_outstanding)

    def next_timer(self):
        if self.error is not None:
            return None
        if self._rnr_until is not None:
            return self._rnr_until
        if self._timer_start is None:
            return None
        return self._timer_start + self.timeout_ns

    # -- sending --------------------------------------------------------------------------------------------

    def poll(self, now):
        """Frames to transmit at ``now`` (after handling an expired timer)."""
        if self.error is not None:
            return []
        if self._rnr_until is not None:
            if now < self._rnr_until:
                return []
            self._rnr_until = None
            self._timer_start = now
        elif self._timer_start is not None and now >= self._timer_start + self.timeout_ns:
            self.stats["timeouts"] += 1
            self._go_back(self.una, now, "retransmission timeout")
            if self.error is not None:
                return []
        out = []
        sq = self._sq
        i, k = self._cur
        window_end = psn_add(self.una, self.max_outstanding)
        while i < len(sq) and self.nxt != window_end:
            wr = sq[i]
            psn = self.nxt
            last = k == wr.npkts - 1
            nxt = psn_add(psn, 1)
            ack_req = last or nxt == window_end or (self.ack_req_every and (k + 1) % self.ack_req_every == 0)
            out.append(self._packet(wr, k, psn, ack_req))
            if psn_distance(psn, self.una) < psn_distance(self.sent_hi, self.una):
                self.stats["retransmitted_packets"] += 1
            else:
                self.sent_hi = nxt
            if self._timer_start is None:
                self._timer_start = now
            self.nxt = nxt
            if last:
                i, k = i + 1, 0
            else:
                k += 1
        self._cur = (i, k)
        self.stats["packets_sent"] += len(out)
        return out

    def _packet(self, wr, k, psn, ack_req):
        n = wr.npkts
        mtu = self.mtu
        payload = wr.data[k * mtu:(k + 1) * mtu]
        imm = wr.immediate
        if n == 1:
            opcode = RDMA_WRITE_ONLY if imm is None else RDMA_WRITE_ONLY_IMM
        elif k == 0:
            opcode = RDMA_WRITE_FIRST
        elif k == n - 1:
            opcode = RDMA_WRITE_LAST if imm is None else RDMA_WRITE_LAST_IMM
        else:
            opcode = RDMA_WRITE_MIDDLE
        reth = (wr.va, wr.rkey, len(wr.data)) if k == 0 else None
        immdt = imm if k == n - 1 else None
        return self._frame(opcode, psn, payload, ack_req=1 if ack_req else 0, reth=reth, immdt=immdt,
                           dscp=wr.dscp)

    # -- receiving ------------------------------------------------------------------------------------------

    def receive(self, frame, now, parsed=None):
        """Handle an ACK/NAK frame from the responder (``parsed``: its ``parse_frame`` result, if known)."""
        accepted = self._filter.accept(frame, parsed)
        if isinstance(accepted, str):
            self.stats["dropped"] += 1
            return
        h, _ = accepted
        if h["bth_opcode"] != ACKNOWLEDGE:
            self.stats["ignored"] += 1
            return
        if self.error is not None:
            return
        syndrome = h["aeth_syndrome"]
        psn = h["bth_psn"]
        kind = syndrome >> 5
        offset = psn_distance(psn, self.una)
        outstanding = self.outstanding
        if kind == 0b000:
            self.stats["acks_received"] += 1
            if offset < outstanding:
                self._acknowledge(psn_add(psn, 1), now)
            else:
                self.stats["stale_responses"] += 1
            return
        if kind not in (0b001, 0b011):
            self.stats["ignored"] += 1      # reserved syndrome
            return
        self.stats["naks_received"] += 1
        # a NAK names an outstanding PSN and acknowledges everything before it
        if offset >= outstanding:
            self.stats["stale_responses"] += 1
            return
        if offset:
            self._acknowledge(psn, now)
        if kind == 0b011 and syndrome != NAK_SEQUENCE_ERROR:
            names = {NAK_INVALID_REQUEST: "invalid request", NAK_REMOTE_ACCESS_ERROR: "remote access error",
                     NAK_REMOTE_OPERATIONAL_ERROR: "remote operational error"}
            self._fail(f"NAK {names.get(syndrome, f'code {syndrome & 0x1F}')} (PSN {psn})")
            return
        if kind == 0b001:
            self.stats["rnr_naks_received"] += 1
            if self._rnr_until is not None and self.nxt == psn:
                return                  # a copy of the NAK that started this wait
            self._rnr_count += 1
            if self.rnr_retry != 7 and self._rnr_count > self.rnr_retry:
                self._fail("RNR retry limit exceeded")
                return
            self._set_nxt(psn)
            self._rnr_until = now + RNR_TIMER_NS[syndrome & 0x1F]
            self._timer_start = None
            return
        if self._retry_psn == psn:
            self.stats["duplicate_naks"] += 1
            return
        self._go_back(psn, now, "sequence error NAK")

    def _acknowledge(self, new_una, now):
        """Everything before ``new_una`` (which is ahead of ``una``, at most ``sent_hi``) is acknowledged."""
        acked = psn_distance(new_una, self.una)
        if psn_distance(self.nxt, self.una) < acked:
            self.nxt = new_una
            nxt_moved = True
        else:
            nxt_moved = False
        sq = self._sq
        popped = 0
        while sq:
            wr = sq[0]
            last_psn = psn_add(wr.first_psn, wr.npkts - 1)
            if psn_distance(last_psn, self.una) >= acked:
                break
            sq.popleft()
            popped += 1
            self.completions.append(wr.wr_id)
        self.una = new_una
        if nxt_moved:
            self._cur = self._locate(self.nxt)
        else:
            self._cur = (self._cur[0] - popped, self._cur[1])
        self._retries = 0
        self._rnr_count = 0
        self._retry_psn = None
        self._timer_start = now if self.una != self.sent_hi else None

    def _locate(self, psn):
        """``(index in _sq, packet index)`` of ``psn`` (``(len(_sq), 0)`` past the last work request)."""
        sq = self._sq
        if not sq:
            return (0, 0)
        target = psn_distance(psn, sq[0].first_psn)
        for i, wr in enumerate(sq):
            if target < wr.npkts:
                return (i, target)
            target -= wr.npkts
        return (len(sq), 0)

    def _set_nxt(self, psn):
        self.nxt = psn
        self._cur = self._locate(psn)

    def _go_back(self, psn, now, reason):
        self._retries += 1
        if self._retries > self.retry_limit:
            self._fail(f"retry limit exceeded ({reason}, PSN {psn})")
            return
        self._set_nxt(psn)
        self._retry_psn = psn
        self._timer_start = now

    def _fail(self, reason):
        self.error = reason
        self.failed.extend(wr.wr_id for wr in self._sq)
        self._sq.clear()
        self._cur = (0, 0)
        self._timer_start = None
        self._rnr_until = None


# --- responder -------------------------------------------------------------------------------------------

class RcResponder(_Sender):
    """The receiving side of an RC connection (RDMA WRITE into a :class:`Memory`)."""

    def __init__(self, local, remote, *, memory, start_psn=0, mtu=1024, ack_coalesce=0, dscp=0, ecn=0,
                 pkey=0xFFFF, ttl=64, source_port=SourcePort.FIXED):
        _check_int("start_psn", start_psn, 24)
        if not isinstance(mtu, int) or mtu <= 0 or mtu % 4:
            raise ValueError(f"mtu must be a positive multiple of 4, not {mtu!r}")
        if ack_coalesce < 0:
            raise ValueError("ack_coalesce must be >= 0")
        self._init_sender(local, remote, dscp=dscp, ecn=ecn, pkey=pkey, ttl=ttl, source_port=source_port)
        self.memory = memory
        self.mtu = mtu
        self.ack_coalesce = ack_coalesce
        self._filter = _Filter(local, remote, pkey)
        self.expected_psn = start_psn
        self.msn = 0
        self.error = None
        self.completions = deque()
        self.stats = dict.fromkeys((
            "packets_received", "packets_accepted", "messages_delivered", "bytes_written", "acks_sent",
            "naks_sent", "sequence_naks", "duplicates", "out_of_sequence", "dropped_bad_frame",
            "dropped_not_for_qp", "dropped_opcode", "dropped_error_state"), 0)
        self._nak_sent = False          # a sequence-error NAK is out for the current gap
        self._since_ack = 0
        self._msg = None                # (va, rkey, dma_len, offset) inside a message, else None

    def _ack(self, syndrome, psn):
        if syndrome >> 5:
            self.stats["naks_sent"] += 1
        else:
            self.stats["acks_sent"] += 1
        return self._frame(ACKNOWLEDGE, psn, aeth=(syndrome, self.msn))

    def _fatal(self, syndrome, reason):
        self.error = reason
        return [self._ack(syndrome, self.expected_psn)]

    def receive(self, frame, now, parsed=None):
        """Handle one request frame (``parsed``: its ``parse_frame`` result, if known); returns the ACK/NAK
        frames to send back."""
        stats = self.stats
        stats["packets_received"] += 1
        accepted = self._filter.accept(frame, parsed)
        if isinstance(accepted, str):
            stats["dropped_" + accepted] += 1
            return []
        if self.error is not None:
            stats["dropped_error_state"] += 1
            return []
        h, payload = accepted
        opcode = h["bth_opcode"]
        if opcode not in _WRITE_OPCODES and opcode not in _OTHER_REQUESTS:
            stats["dropped_opcode"] += 1
            return []
        psn = h["bth_psn"]
        d = psn_distance(psn, self.expected_psn)
        if d:
            if d < _PSN_HALF:
                stats["out_of_sequence"] += 1
                if self._nak_sent:
                    return []
                self._nak_sent = True
                stats["sequence_naks"] += 1
                return [self._ack(NAK_SEQUENCE_ERROR, self.expected_psn)]
            stats["duplicates"] += 1
            return [self._ack(ACK_SYNDROME, psn_add(self.expected_psn, -1))]

        # in sequence
        if opcode not in _WRITE_OPCODES:
            return self._fatal(NAK_INVALID_REQUEST, f"unsupported opcode 0x{opcode:02x} (PSN {psn})")
        first = opcode in _FIRST_OPCODES
        last = opcode in _LAST_OPCODES
        msg = self._msg
        if first == (msg is not None):
            state = "inside a message" if msg is not None else "between messages"
            return self._fatal(NAK_INVALID_REQUEST, f"opcode 0x{opcode:02x} {state} (PSN {psn})")
        n = len(payload)
        if first:
            va, rkey, dma_len = h["reth_va"], h["reth_rkey"], h["reth_dma_len"]
            if dma_len and not self.memory.writable(rkey, va, dma_len):
                return self._fatal(NAK_REMOTE_ACCESS_ERROR,
                                   f"R_Key 0x{rkey:08x} does not allow [0x{va:x}, +{dma_len}) (PSN {psn})")
            offset = 0
        else:
            va, rkey, dma_len, offset = msg
        if last:
            length_ok = n <= self.mtu and offset + n == dma_len and (first or n > 0)
        else:
            length_ok = n == self.mtu and offset + n < dma_len
        if not length_ok:
            return self._fatal(NAK_INVALID_REQUEST,
                               f"length error: {n} bytes at offset {offset} of {dma_len} (PSN {psn})")
        if n:
            self.memory._write(rkey, va + offset, payload)
            stats["bytes_written"] += n
        stats["packets_accepted"] += 1
        self.expected_psn = psn_add(psn, 1)
        self._nak_sent = False
        if last:
            self.msn = (self.msn + 1) & _PSN_MASK
            self._msg = None
            self.completions.append((va, dma_len, h["immdt"] if h["has_immdt"] else None))
            stats["messages_delivered"] += 1
        else:
            self._msg = (va, rkey, dma_len, offset + n)
        self._since_ack += 1
        if h["bth_ack_req"] or (self.ack_coalesce and self._since_ack >= self.ack_coalesce):
            self._since_ack = 0
            return [self._ack(ACK_SYNDROME, psn)]
        return []
