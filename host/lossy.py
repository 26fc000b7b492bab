"""The bounded-loss worker: gradients as single-packet UC messages that may be lost, sums that may be partial.

docs/ARCHITECTURE.md, "Bounded-loss class (MLT)", is the switch's side; this is the host's. Worker ``w`` of a
job owns a UC requester (:mod:`netreduce.host.uc`) that writes its messages toward the peer host ``(w + 1)
mod N`` through the switch, and the UC responder of connection ``receive_connection`` (``w - 1`` in the
ring of :func:`netreduce.host.network.build_allreduce`), into which the switch writes the results.

- **Messages.** Each layer's gradient (``layers``: ``[(name, size), ...]`` in forward order, as
  :mod:`netreduce.host.workloads` gives them; one layer, the whole tensor, by default) is cut into messages
  of at most ``mtu - 16`` bytes of whole elements: a message never spans two layers. Message ``i`` is the
  16-byte aggregation header (job, ``(start_msg + i) mod 2^32``, element count, dtype, and its DSCP as
  ``priority``) and its elements, an odd count of 16-bit elements padded with one +0, sent once as a UC
  RDMA WRITE ONLY with immediate ``1 << w`` to ``result_va + i * mtu``, the address where every receiver
  of the job keeps message ``i``'s result. Its DSCP is its class in ``class_map``
  (:mod:`netreduce.host.classify`: the layer's group, the packet's magnitude bucket within its layer); the
  UDP source port is the requester's rule (``SourcePort.PER_PACKET`` in ``build_allreduce``).
- **Credits** as for the reliable worker (:mod:`netreduce.host.worker`), with the job's window W = K/2,
  and a worker's own results count as credits: once it holds the results of messages ``0 .. i``, the
  switch has completed them all, so its oldest message is past ``i`` and it allows up to ``i + W`` (a
  lost CREDIT then costs nothing as long as the result before it came). While it waits for a credit, each
  ``credit_timeout_ns`` the worker also asks for the result of the oldest message of its window (a
  RESULT_REQUEST), unless it holds it: if every packet of that message was lost, the request opens it at
  the switch, whose deadline then completes it and moves the window on.
- **Results.** A result (a delivered WRITE with immediate) is checked as on the reliable worker (its
  aggregation header names the message at its place) and stored: its elements in ``result``, the bitmap of
  its immediate in ``contributors`` for each of them. Further copies are ignored.
- **Loss.** A message whose result has not come ``result_timeout_ns`` after it was sent is zero-filled
  (``result`` and ``contributors`` 0, counted in ``zero_filled_elements``), as long as the worker's
  zero-filled elements stay within ``loss_bound`` (a fraction of its tensor's elements: one iteration).
  Past the bound it *recovers* instead: it sends a RESULT_REQUEST (job, ``receive_connection``, the message
  number), again every ``request_timeout_ns``, up to ``request_retries`` times, and zero-fills only when
  none is answered (the switch reuses a slot once the window has moved K/2 messages past it, and sends one
  receiver a result again ``RESULT_RESENDS`` times at most). To ask
  while the result is still in the switch, whenever the result of a later message comes, the worker asks
  at once for the messages before it still without a result that zero-filling (in order, after the fills
  made) would take past the bound, at most once every ``request_interval_ns`` per message (asking for a
  message still open costs a control packet and nothing else: its result goes out at its completion).
  ``recovered`` counts the results that came after the worker asked for them (asked too early, a request
  may have been needless: the result was only late).
- **Rescaling.** :meth:`LossyWorker.average` is the all-reduced mean as training uses it: each element's
  sum divided by the number of workers its bitmap names (``rescale=True``, the default: an unbiased
  average of the gradients that arrived), or by N (``rescale=False``: MLT's zero fill, which shrinks the
  average by the fraction lost); 0 where the result was zero-filled.
"""

import enum
from dataclasses import dataclass

import numpy as np

from netreduce.host.classify import ClassMap, classify_layers, split_layers
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame
from netreduce.host.worker import Worker, tensor_dtype
from netreduce.sim.fp import get_format, to_float64
from netreduce.wire import AGG_HEADER_BYTES, MSG_SEQ_MODULUS, ControlType, msg_distance

__all__ = ["LossyWorker", "ResultState", "lossy_layout", "popcount"]


class ResultState(enum.Enum):
    """Where a message's result stands at its worker."""
    PENDING = "pending"         # sent; no result yet
    RECEIVED = "received"       # a result came (full or partial: see its contributors)
    FILLED = "filled"           # given up: zero-filled


@dataclass
class _Pending:
    due: int                    # when the worker acts next: the result timeout, then each request's
    timeouts: int = 0           # the timeouts past the first that sent a request
    asked: int | None = None    # when the worker last asked for the result


def popcount(bitmaps):
    """The number of set bits of each 32-bit bitmap of ``bitmaps``."""
    bits = np.unpackbits(np.ascontiguousarray(bitmaps, dtype="<u4").view(np.uint8)).reshape(-1, 32)
    return bits.sum(axis=1).reshape(np.shape(bitmaps))


def lossy_layout(job, layer_sizes):
    """``[(first element, element count), ...]`` of a bounded-loss job's messages for layers of
    ``layer_sizes`` elements, concatenated: each layer cut into messages of one packet of ``job.mtu``."""
    per_message = (job.mtu - AGG_HEADER_BYTES) // tensor_dtype(job.dtype).itemsize
    layout, start = [], 0
    for size in layer_sizes:
        layout += [(start + offset, min(per_message, size - offset)) for offset in range(0, size, per_message)]
        start += size
    return layout


class LossyWorker(Worker):
    """One worker of one bounded-loss job (module docstring). ``tensor`` holds element bit patterns."""

    def __init__(self, job, index, tensor, *, requester, responder, memory, result_va, send_rkey, host, switch,
                 control_port, receive_connection, layers=None, class_map=None, credit_timeout_ns=50_000,
                 result_timeout_ns=200_000, request_timeout_ns=None, request_interval_ns=10_000, request_retries=3,
                 loss_bound=0.01, rescale=True):
        if not job.lossy:
            raise ValueError(f"job {job.job} is not a bounded-loss job")
        if not 0.0 <= loss_bound <= 1.0:
            raise ValueError(f"loss_bound {loss_bound} is not a fraction between 0 and 1")
        if result_timeout_ns <= 0 or request_retries < 0:
            raise ValueError("result_timeout_ns must be positive and request_retries not negative")
        super().__init__(job, index, tensor, requester=requester, responder=responder, memory=memory,
                         send_va=result_va, send_rkey=send_rkey, recv_va=result_va, host=host, switch=switch,
                         control_port=control_port, credit_timeout_ns=credit_timeout_ns)
        self.receive_connection = receive_connection
        self.layers = [("tensor", len(self.tensor))] if layers is None else list(layers)
        self.layout = lossy_layout(job, [size for _, size in self.layers])
        self.class_map = ClassMap.default() if class_map is None else class_map
        per_message = (job.mtu - AGG_HEADER_BYTES) // self.tensor.itemsize
        with np.errstate(invalid="ignore"):        # infinities among the magnitudes: inf - inf in a quantile
            classes = classify_layers(self.layers, split_layers(self.layers, self.tensor), per_message,
                                      self.class_map, dtype=job.dtype)
        self.dscp = [int(d) for layer in classes for d in layer.dscp]
        assert len(self.dscp) == len(self.layout)
        self.result_timeout_ns = result_timeout_ns
        self.request_timeout_ns = result_timeout_ns if request_timeout_ns is None else request_timeout_ns
        self.request_interval_ns = request_interval_ns
        self.request_retries = request_retries
        self.loss_bound = loss_bound
        self.rescale = rescale
        self.state = [None] * self.messages          # a ResultState once the message is sent
        self.contributors = np.zeros(len(self.tensor), dtype=np.uint32)
        self.filled = set()
        self.zero_filled_elements = 0
        self.recovered = 0
        self.result_requests = 0
        self.duplicate_results = 0
        self._pending = {}                           # message index -> _Pending
        self._received_through = 0                   # messages 0 .. this - 1 have their results here

    # --- state ------------------------------------------------------------------------------------------

    @property
    def done(self):
        return (self.next_message == self.messages and not self._pending
                and self.completed == self.messages)

    @property
    def elements(self):
        return len(self.tensor)

    @property
    def loss_fraction(self):
        """The worker's zero-filled elements, as a fraction of its tensor's."""
        return self.zero_filled_elements / self.elements if self.elements else 0.0

    def average(self):
        """The mean of the workers' gradients as the results give it (float64): each element's sum divided by
        the number of its contributors (``rescale``) or by N; 0 where nothing arrived."""
        values = to_float64(get_format(self.job.dtype), self.result)
        if not self.rescale:
            return values / self.job.workers
        count = popcount(self.contributors)
        return np.divide(values, count, out=np.zeros_like(values), where=count > 0)

    def next_timer(self):
        times = [p.due for p in self._pending.values()]
        credit = super().next_timer()
        if credit is not None:
            times.append(credit)
        return min(times, default=None)

    # --- driving ------------------------------------------------------------------------------------------

    def pump(self, now):
        """Post every message the credits allow; take the results delivered; act on the timers. Returns the
        control frames to send (credit and result requests)."""
        frames = []
        if self.may_post:       # a wait for credit, if there was one, is over: a new one starts from now
            self._waiting_since = self._last_request = None
        while self.may_post:
            i = self.next_message
            start, count = self.layout[i]
            header = AggHeader(self.job.job, self.msg_seq(i), count, self.job.dtype, self.dscp[i])
            data = header.pack() + self.tensor[start:start + count].tobytes()
            data += bytes(-len(data) % 4)      # an odd count of 16-bit elements: one +0 more
            self.requester.post_write(data, va=self.send_va + i * self.stride, rkey=self.send_rkey,
                                      immediate=1 << self.index, dscp=self.dscp[i])
            if self.state[i] is None:              # its result may have come already, without it
                self.state[i] = ResultState.PENDING
                self._pending[i] = _Pending(now + self.result_timeout_ns)
            self.next_message += 1
        self.completed += self._drain(self.requester.completions)
        for va, length, immediate in self._take(self.responder.completions):
            self._deliver_result(va, length, immediate, now, frames)
        for i in sorted(i for i, p in self._pending.items() if p.due <= now):
            pending = self._pending[i]
            if pending.asked is None and not self._past_bound(i):
                self._fill(i)
            elif pending.timeouts < self.request_retries:
                pending.timeouts += 1
                pending.due = now + self.request_timeout_ns
                frames.append(self._request(i, now))
            else:
                self._fill(i)
        return frames + self._credit_frames(now)

    def _credit_frames(self, now):
        frames = super()._credit_frames(now)
        if frames:
            oldest = (self.allowed - self.job.window + 1 - self.job.start_msg) % MSG_SEQ_MODULUS
            if oldest < self.messages and self.state[oldest] is not ResultState.RECEIVED:
                frames.append(self._result_request(oldest))
        return frames

    # --- internals ----------------------------------------------------------------------------------------

    def _past_bound(self, i):
        """Whether zero-filling message ``i`` would take the worker's loss past its bound."""
        return self.zero_filled_elements + self.layout[i][1] > self.loss_bound * self.elements

    def _fill(self, i):
        start, count = self.layout[i]
        self.result[start:start + count] = 0
        self.contributors[start:start + count] = 0
        self.zero_filled_elements += count
        self.state[i] = ResultState.FILLED
        self.filled.add(i)
        del self._pending[i]

    def _request(self, i, now):
        self._pending[i].asked = now
        return self._result_request(i)

    def _result_request(self, i):
        self.result_requests += 1
        message = ControlMessage(ControlType.RESULT_REQUEST, self.job.job, self.receive_connection, self.msg_seq(i))
        return build_control_frame(message, src_mac=self.host.mac, dst_mac=self.switch.mac, src_ip=self.host.ip,
                                   dst_ip=self.switch.ip, port=self.control_port)

    def _deliver_result(self, va, length, immediate, now, frames):
        index, offset = divmod(va - self.recv_va, self.stride)
        data = self.memory.read(va, length)
        header = AggHeader.unpack(data)
        if (offset or not 0 <= index < self.messages or header is None or header.msg_seq != self.msg_seq(index)
                or header.job != self.job.job):
            self.errors.append(f"worker {self.index}: unexpected result at va {va:#x} ({length} bytes)")
            return
        start, count = self.layout[index]
        size = self.result.itemsize
        if header.elements != count or length != AGG_HEADER_BYTES + count * size + (-count * size % 4):
            self.errors.append(f"worker {self.index}: result {index} has {header.elements} elements, {length} "
                               f"bytes; expected {count}")
            return
        if immediate is None or not 0 < immediate < 1 << self.job.workers:
            self.errors.append(f"worker {self.index}: result {index} names contributors {immediate!r}")
            return
        if self.state[index] in (ResultState.RECEIVED, ResultState.FILLED):
            self.duplicate_results += 1         # a copy, or too late: the zero fill stands
            return
        body = data[AGG_HEADER_BYTES:AGG_HEADER_BYTES + count * size]
        self.result[start:start + count] = np.frombuffer(body, dtype=self.result.dtype)
        self.contributors[start:start + count] = immediate
        self.state[index] = ResultState.RECEIVED
        self.received.add(index)
        while self._received_through < self.messages and self.state[self._received_through] is ResultState.RECEIVED:
            self._received_through += 1
        if self._received_through:          # the switch completed messages 0 .. through - 1: a credit
            allowed = (self.msg_seq(self._received_through - 1) + self.job.window) % MSG_SEQ_MODULUS
            if msg_distance(allowed, self.allowed) > 0:
                self.allowed = allowed
        pending = self._pending.pop(index, None)
        if pending is not None and pending.asked is not None:
            self.recovered += 1
        # the results of the messages before it should be here by now: those that zero-filling (in order,
        # after the fills already made) would take past the bound are asked for at once
        filling = self.zero_filled_elements
        for i, waiting in sorted(self._pending.items()):
            if i >= index:
                break
            count = self.layout[i][1]
            if waiting.asked is None and filling + count <= self.loss_bound * self.elements:
                filling += count
            elif waiting.asked is None or now - waiting.asked >= self.request_interval_ns:
                frames.append(self._request(i, now))
