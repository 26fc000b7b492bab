"""The worker API: a gradient tensor in, the all-reduced tensor out, over RoCE v2 RC through the switch.

Worker ``w`` of a job owns two RC queue pairs (``netreduce.host.rc``): the requester of its own
connection, which RDMA-WRITEs its messages to the peer host ``(w + 1) mod N``, and the responder of
connection ``w - 1``, into which the switch delivers the sums (docs/ARCHITECTURE.md, "Aggregation").

- **Messages.** The tensor's little-endian bytes are cut into messages of at most
  ``message_packets * mtu - 16`` bytes of whole elements; message ``i`` is the 16-byte aggregation header
  (job, sequence number ``(start_msg + i) mod 2^32``, element count, dtype, priority) followed by its
  elements, written to the peer's receive buffer at ``recv_va + i * message_packets * mtu``. The switch
  sums whole 32-bit words, so a message of an odd number of 16-bit elements carries one more element, +0,
  which the receiver ignores.
- **Credits.** The worker starts a message only while its sequence number is not ahead of the highest one
  the switch allowed (``start_msg + W - 1`` before any CREDIT arrives, W the job's window), comparing modulo 2^32
  (:func:`netreduce.wire.msg_distance`). A CREDIT counts only when its frame comes from the switch's MAC,
  IPv4 address and control port: anyone can send one, and a forged CREDIT would let the worker overrun
  the switch's window. While it waits for a credit, it sends a CREDIT_REQUEST every
  ``credit_timeout_ns``, so that a lost CREDIT cannot stall it for ever.
- **Class.** With a ``class_map`` (:class:`netreduce.host.classify.ClassMap`), every frame of the worker's
  two queue pairs, its messages and the ACKs of its results, carries the map's reliable DSCP (the worker
  sets both QPs' ``dscp``); without one, the QPs keep the DSCP they were built with.
- **Results.** Each message that the responder delivers is read back from the receive buffer, its
  aggregation header checked (job, and the sequence number of the message at that place) and skipped, and
  its elements stored at their place in ``result``.
"""

from dataclasses import dataclass

import numpy as np

from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame, ip_to_int, mac_to_int
from netreduce.sim.fp import get_format
from netreduce.wire import AGG_HEADER_BYTES, MSG_SEQ_MODULUS, ControlType, msg_distance

__all__ = ["HostAddress", "Worker", "message_layout", "tensor_dtype"]


@dataclass(frozen=True)
class HostAddress:
    mac: int
    ip: str


def tensor_dtype(dtype):
    """The numpy dtype that holds a tensor of ``dtype`` (fp32, bf16, fp16) as little-endian bit patterns."""
    return np.dtype("<u4") if get_format(dtype).width == 32 else np.dtype("<u2")


def message_layout(job, elements):
    """``[(first element, element count), ...]`` of the messages of a tensor of ``elements`` elements (of
    one packet each for a bounded-loss job)."""
    size = tensor_dtype(job.dtype).itemsize
    per_message = (job.packets_per_message * job.mtu - AGG_HEADER_BYTES) // size
    return [(start, min(per_message, elements - start)) for start in range(0, elements, per_message)]


def _padded(nbytes):
    return nbytes + -nbytes % 4


class Worker:
    """One worker of one job. ``tensor`` holds element bit patterns (see :func:`tensor_dtype`)."""

    def __init__(self, job, index, tensor, *, requester, responder, memory, send_va, send_rkey, recv_va,
                 host, switch, control_port, priority=0, credit_timeout_ns=50_000, class_map=None):
        self.job, self.index = job, index
        self.tensor = np.ascontiguousarray(tensor, dtype=tensor_dtype(job.dtype))
        self.requester, self.responder, self.memory = requester, responder, memory
        self.send_va, self.send_rkey, self.recv_va = send_va, send_rkey, recv_va
        self.host, self.switch, self.control_port = host, switch, control_port
        self.priority = priority
        self.credit_timeout_ns = credit_timeout_ns
        self.class_map = class_map
        if class_map is not None:
            requester.dscp = responder.dscp = class_map.reliable
        self.layout = message_layout(job, len(self.tensor))
        self.stride = job.packets_per_message * job.mtu
        self.allowed = (job.start_msg + job.window - 1) % MSG_SEQ_MODULUS   # the highest msg_seq allowed
        self.next_message = 0                        # the index of the next message to post
        self.completed = 0                           # own messages acknowledged end to end
        self.result = np.zeros_like(self.tensor)
        self.received = set()
        self.errors = []
        self._waiting_since = None                   # when the worker started waiting for a credit
        self._last_request = None
        self.credit_requests = 0

    # --- state ------------------------------------------------------------------------------------------

    @property
    def messages(self):
        return len(self.layout)

    def msg_seq(self, index):
        """The sequence number of the tensor's message ``index``."""
        return (self.job.start_msg + index) % MSG_SEQ_MODULUS

    @property
    def may_post(self):
        """Whether the credits allow the next message."""
        return (self.next_message < self.messages
                and msg_distance(self.msg_seq(self.next_message), self.allowed) <= 0)

    @property
    def done(self):
        return len(self.received) == self.messages and self.completed == self.messages

    @property
    def failed(self):
        return self.requester.error is not None or bool(self.errors)

    # --- driving ------------------------------------------------------------------------------------------

    def pump(self, now):
        """Post every message the credits allow; return control frames to send (credit requests)."""
        while self.may_post:
            start, count = self.layout[self.next_message]
            header = AggHeader(self.job.job, self.msg_seq(self.next_message), count, self.job.dtype,
                               self.priority)
            data = header.pack() + self.tensor[start:start + count].tobytes()
            data += bytes(-len(data) % 4)      # an odd count of 16-bit elements: one +0 more
            self.requester.post_write(data, va=self.send_va + self.next_message * self.stride,
                                      rkey=self.send_rkey)
            self.next_message += 1
        self.completed += self._drain(self.requester.completions)
        for va, length, _immediate in self._take(self.responder.completions):
            self._deliver(va, length)
        return self._credit_frames(now)

    def _credit_frames(self, now):
        """A CREDIT_REQUEST when the worker has waited ``credit_timeout_ns`` for a credit (again)."""
        if self.next_message < self.messages and not self.may_post:
            if self._waiting_since is None:
                self._waiting_since = now
            last = self._last_request if self._last_request is not None else self._waiting_since
            if now - last >= self.credit_timeout_ns:
                self._last_request = now
                self.credit_requests += 1
                return [self._credit_request()]
        else:
            self._waiting_since = self._last_request = None
        return []

    def next_timer(self):
        """When :meth:`pump` must run again to send a credit request (``None``: no need)."""
        if self._waiting_since is None:
            return None
        last = self._last_request if self._last_request is not None else self._waiting_since
        return last + self.credit_timeout_ns

    def on_control(self, message, *, mac, ip, port):
        """A control ``message`` arrived in a frame from Ethernet source ``mac``, IPv4 source ``ip`` and UDP
        source ``port``: a CREDIT for this worker moves ``allowed`` ahead, if it comes from the switch."""
        if (message.type == ControlType.CREDIT and message.job == self.job.job and message.worker == self.index
                and mac_to_int(mac) == mac_to_int(self.switch.mac) and ip_to_int(ip) == ip_to_int(self.switch.ip)
                and port == self.control_port and msg_distance(message.value, self.allowed) > 0):
            self.allowed = message.value

    # --- internals ----------------------------------------------------------------------------------------

    @staticmethod
    def _take(queue):
        items = list(queue)
        queue.clear()
        return items

    def _drain(self, queue):
        return len(self._take(queue))

    def _credit_request(self):
        message = ControlMessage(ControlType.CREDIT_REQUEST, self.job.job, self.index)
        return build_control_frame(message, src_mac=self.host.mac, dst_mac=self.switch.mac,
                                   src_ip=self.host.ip, dst_ip=self.switch.ip, port=self.control_port)

    def _deliver(self, va, length):
        index, offset = divmod(va - self.recv_va, self.stride)
        data = self.memory.read(va, length)
        header = AggHeader.unpack(data)
        if (offset or not 0 <= index < self.messages or header is None or header.msg_seq != self.msg_seq(index)
                or header.job != self.job.job):
            self.errors.append(f"worker {self.index}: unexpected message at va {va:#x} ({length} bytes)")
            return
        start, count = self.layout[index]
        body = data[AGG_HEADER_BYTES:AGG_HEADER_BYTES + count * self.result.itemsize]
        if header.elements != count or len(data) != AGG_HEADER_BYTES + _padded(count * self.result.itemsize):
            self.errors.append(f"worker {self.index}: message {index} has {header.elements} elements, "
                               f"{len(body)} bytes; expected {count}")
            return
        self.result[start:start + count] = np.frombuffer(body, dtype=self.result.dtype)
        self.received.add(index)
