"""RoCE v2 Unreliable Connection endpoints for RDMA WRITE, as pure state machines with explicit time.

The bounded-loss class (docs/ARCHITECTURE.md, "Bounded-loss class (MLT)") sends each message as one UC
RDMA WRITE ONLY with immediate. Written from the InfiniBand Architecture Specification vol. 1, 9.8
"Unreliable Connection" (UC has PSNs but no acknowledgements, no retransmission and no duplicate
detection) and Annex A17 "RoCEv2", beside :mod:`netreduce.host.rc`, whose frame builder, receive filter and
source-port rules it shares: only the transport's rules differ.

Interface
---------
``UcRequester(local, remote, *, start_psn=0, mtu=1024, dscp=0, ecn=0, pkey=0xFFFF, ttl=64,
source_port=SourcePort.FIXED)``
    - ``post_write(data, *, va, rkey, immediate=None, dscp=None) -> int``: queue an RDMA WRITE; returns its
      work request id (0, 1, 2, ...). ``dscp``: this work request's packets' DSCP instead of the QP's.
    - ``poll(now) -> list[bytes]``: every packet of the queued work requests, in PSN order; each work
      request completes (``completions``) as its last packet leaves: UC has nothing to wait for.
    - ``receive(frame, now, parsed=None)``: nothing comes back on UC; the frame is counted
      (``stats["ignored"]``).
    - ``next_timer()`` is always ``None``; ``idle``; ``error`` (always ``None``) and ``failed`` (always
      empty), so that a worker treats both transports alike; ``dscp``, ``source_port`` settable as on RC.
    - ``stats``: ``packets_sent``, ``retransmitted_packets`` (always 0), ``ignored``.

``UcResponder(local, remote, *, memory, start_psn=0, mtu=1024, pkey=0xFFFF)``
    - ``receive(frame, now, parsed=None) -> list[bytes]``: always ``[]`` (UC answers nothing).
    - ``completions``: deque of delivered messages ``(va, length, immediate or None)``, in order.
    - ``expected_psn``; ``stats``: ``packets_received``, ``packets_accepted``, ``messages_delivered``,
      ``bytes_written``, ``out_of_sequence``, ``messages_dropped``, ``dropped_bad_frame``,
      ``dropped_not_for_qp``, ``dropped_opcode``, ``dropped_access``, ``dropped_length``.

Rules
-----
Requester. A WRITE of ``n`` bytes is ``max(1, ceil(n / mtu))`` packets, segmented as on RC: every packet
but the last carries exactly ``mtu`` bytes, FIRST/ONLY carry the RETH, LAST/ONLY the ImmDt when the write
has an immediate, payloads are padded to 4 bytes. The opcodes are UC's (0x26 .. 0x2B); AckReq is never
set. Each packet is sent once, with consecutive PSNs from ``start_psn`` (modulo 2^24).

Responder. The expected PSN starts at ``start_psn``. A FIRST or ONLY starts a new message at any PSN (a
message in progress is dropped: ``messages_dropped``), and the expected PSN becomes its PSN + 1: on UC a
lost packet costs its message only, and the next message is taken whatever came before. A MIDDLE or LAST
is taken only with the expected PSN inside a message; otherwise it is dropped with the message in progress
(``out_of_sequence``), and the responder waits for the next FIRST or ONLY. The RETH's R_Key and range must
fall in a region that allows remote writes (``dropped_access``), and the lengths must follow the
segmentation rule and add up to the RETH's DMA length (``dropped_length``); either failure drops the
message. Payloads are written as their packets are taken; a message is delivered (``completions``) with
its last packet.

Choices the IBA leaves open (or that this model makes)
------------------------------------------------------
- A remote access or length error on UC drops the message and leaves the QP usable (no NAK exists to
  report it, and one bad packet must not stop the class that expects loss).
- A duplicate WRITE ONLY is written and delivered again: UC has no duplicate detection, and the
  application (here, the bounded-loss worker) ignores a second copy of a result it holds.
- Frames are filtered as on RC (:mod:`netreduce.host.rc`): not RoCE v2 over IPv4, bad ICRC or IPv4
  checksum, addresses or QPN not the connection's, other P_Key or transport version; RC opcodes and UC SEND
  opcodes are dropped (``dropped_opcode``).
"""

from collections import deque

from netreduce.host.rc import Endpoint, Memory, SourcePort, _check_int, _Filter, _Sender, checked_write, psn_add
from netreduce.wire import UC_WRITE_OPCODES

__all__ = ["UcRequester", "UcResponder", "Endpoint", "Memory", "SourcePort", "UC_WRITE_OPCODES"]

_FIRST = UC_WRITE_OPCODES["FIRST"]
_MIDDLE = UC_WRITE_OPCODES["MIDDLE"]
_LAST = UC_WRITE_OPCODES["LAST"]
_LAST_IMM = UC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"]
_ONLY = UC_WRITE_OPCODES["ONLY"]
_ONLY_IMM = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]
_STARTS = frozenset((_FIRST, _ONLY, _ONLY_IMM))
_ENDS = frozenset((_LAST, _LAST_IMM, _ONLY, _ONLY_IMM))
_WRITES = frozenset(UC_WRITE_OPCODES.values())


def _check_mtu(mtu):
    if not isinstance(mtu, int) or mtu <= 0 or mtu % 4:
        raise ValueError(f"mtu must be a positive multiple of 4, not {mtu!r}")
    return mtu


class UcRequester(_Sender):
    """The sending side of a UC connection (RDMA WRITE): every packet once, nothing awaited."""

    def __init__(self, local, remote, *, start_psn=0, mtu=1024, dscp=0, ecn=0, pkey=0xFFFF, ttl=64,
                 source_port=SourcePort.FIXED):
        _check_int("start_psn", start_psn, 24)
        self._init_sender(local, remote, dscp=dscp, ecn=ecn, pkey=pkey, ttl=ttl, source_port=source_port)
        self.mtu = _check_mtu(mtu)
        self.nxt = start_psn            # the PSN of the next packet
        self.completions = deque()
        self.failed = []
        self.error = None
        self.stats = dict.fromkeys(("packets_sent", "retransmitted_packets", "ignored"), 0)
        self._queue = deque()
        self._next_wr_id = 0

    @property
    def idle(self):
        return not self._queue

    def post_write(self, data, *, va, rkey, immediate=None, dscp=None):
        """Queue an RDMA WRITE of ``data`` to ``va`` under ``rkey``; returns the work request id."""
        data = checked_write(data, va=va, rkey=rkey, immediate=immediate, dscp=dscp)
        wr_id = self._next_wr_id
        self._next_wr_id += 1
        self._queue.append((wr_id, data, va, rkey, immediate, dscp))
        return wr_id

    def poll(self, now):
        """Every queued packet, in PSN order; their work requests complete."""
        out = []
        while self._queue:
            wr_id, data, va, rkey, immediate, dscp = self._queue.popleft()
            packets = max(1, -(-len(data) // self.mtu))
            for k in range(packets):
                last = k == packets - 1
                if packets == 1:
                    opcode = _ONLY if immediate is None else _ONLY_IMM
                elif k == 0:
                    opcode = _FIRST
                elif last:
                    opcode = _LAST if immediate is None else _LAST_IMM
                else:
                    opcode = _MIDDLE
                out.append(self._frame(opcode, self.nxt, data[k * self.mtu:(k + 1) * self.mtu],
                                       reth=(va, rkey, len(data)) if k == 0 else None,
                                       immdt=immediate if last else None, dscp=dscp))
                self.nxt = psn_add(self.nxt, 1)
            self.completions.append(wr_id)
        self.stats["packets_sent"] += len(out)
        return out

    def receive(self, frame, now, parsed=None):
        """Nothing is expected back on UC."""
        self.stats["ignored"] += 1

    def next_timer(self):
        return None


class UcResponder:
    """The receiving side of a UC connection (RDMA WRITE into a :class:`Memory`); it never answers."""

    def __init__(self, local, remote, *, memory, start_psn=0, mtu=1024, pkey=0xFFFF):
        _check_int("start_psn", start_psn, 24)
        self.local, self.remote = local, remote
        self.memory = memory
        self.mtu = _check_mtu(mtu)
        self._filter = _Filter(local, remote, pkey)
        self.expected_psn = start_psn
        self.completions = deque()
        self.error = None
        self.stats = dict.fromkeys((
            "packets_received", "packets_accepted", "messages_delivered", "bytes_written", "out_of_sequence",
            "messages_dropped", "dropped_bad_frame", "dropped_not_for_qp", "dropped_opcode", "dropped_access",
            "dropped_length"), 0)
        self._msg = None                # (va, rkey, dma_len, offset) inside a message, else None

    def receive(self, frame, now, parsed=None):
        """Take one request frame; UC answers nothing, so this returns ``[]``."""
        stats = self.stats
        stats["packets_received"] += 1
        accepted = self._filter.accept(frame, parsed)
        if isinstance(accepted, str):
            stats["dropped_" + accepted] += 1
            return []
        h, payload = accepted
        opcode, psn = h["bth_opcode"], h["bth_psn"]
        if opcode not in _WRITES:
            stats["dropped_opcode"] += 1
            return []
        if opcode in _STARTS:
            if self._msg is not None:
                stats["messages_dropped"] += 1
            va, rkey, dma_len, offset = h["reth_va"], h["reth_rkey"], h["reth_dma_len"], 0
            if dma_len and not self.memory.writable(rkey, va, dma_len):
                self._drop(psn, "dropped_access")
                return []
        elif self._msg is None or psn != self.expected_psn:
            stats["out_of_sequence"] += 1
            if self._msg is not None:
                stats["messages_dropped"] += 1
                self._msg = None
            return []
        else:
            va, rkey, dma_len, offset = self._msg
        n = len(payload)
        if opcode in _ENDS:
            length_ok = n <= self.mtu and offset + n == dma_len
        else:
            length_ok = n == self.mtu and offset + n < dma_len
        if not length_ok:
            self._drop(psn, "dropped_length")
            return []
        if n:
            self.memory._write(rkey, va + offset, payload)
            stats["bytes_written"] += n
        stats["packets_accepted"] += 1
        self.expected_psn = psn_add(psn, 1)
        if opcode in _ENDS:
            self._msg = None
            self.completions.append((va, dma_len, h["immdt"] if h["has_immdt"] else None))
            stats["messages_delivered"] += 1
        else:
            self._msg = (va, rkey, dma_len, offset + n)
        return []

    def _drop(self, psn, reason):
        """The message of the packet ``psn`` is dropped: wait for the next FIRST or ONLY."""
        self.stats[reason] += 1
        self.stats["messages_dropped"] += 1
        self._msg = None
        self.expected_psn = psn_add(psn, 1)
