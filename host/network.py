"""A network of emulated RoCE v2 hosts around a switch engine, as a discrete-event simulation.

Hosts carry the workers of every job (worker ``w`` of each job on host ``w``); host ``h`` hangs on switch
port ``h mod P``. Hosts that carry no worker (``extra_hosts`` of :func:`build_allreduce`: an attacker, say)
come after them, on ports of their own choosing, and are in the forwarding table like the others. Each
port is a full-duplex cable that its hosts share (a :class:`Link` each way: a rate, a propagation delay,
one frame at a time), and each host has a :class:`~netreduce.host.faults.FaultInjector` on its side of
the port in each direction ("host to switch", "switch to host"). The switch is an *engine*:
:class:`ModelEngine` runs the golden model (:mod:`netreduce.sim.switch_model`); an RTL engine drives the
generated Verilog from a cocotb testbench through the same two calls: the network calls
``engine.inject(port, frame, now, after)`` when a frame reaches the switch, and the engine calls
``network.from_switch(port, frame)`` at the simulated time a frame leaves it. ``after`` is how many
frames had come off the switch's egress links (all ports) when the host sent this one: all that a frame
can depend on, so a replay of recorded traffic that holds each frame back until the switch under test has
sent that many frames keeps the traffic's causality. Each of ``network.taps``, ``tap(port, frame)``, sees
every frame as it leaves the switch (an attacker that reacts to the traffic, :mod:`netreduce.host.attacks`).

Time is in integer nanoseconds; the golden model's clock (the deadlines of the bounded-loss class) is the
network's time in clocks of the datapath's width (:data:`CLOCK_NS`). :func:`build_allreduce` sets up jobs,
connections and workers from a few numbers (``traffic_class="lossy"``: the bounded-loss class, on UC queue
pairs with :class:`~netreduce.host.lossy.LossyWorker` workers); :meth:`Network.run` runs until every worker
holds its result (or, bounded-loss, has given up on what did not come), a queue pair fails, or the time
limit passes, and :meth:`Network.summary` reports what happened.

With ``pcap``, the network writes every frame on every host's link, in both directions, to a pcapng file
(:class:`~netreduce.host.pcap.PcapNgWriter`; :meth:`Network.close` ends it). Each link has two
interfaces, one per end: ``host3 (link to switch port 0)`` and ``switch port 0 (link to host3)``. A frame
is recorded at its sender's end (outbound) as sent, at the time the sender hands it over (it may then
wait for the port's shared link), and at its receiver's end (inbound) as received, at the time it has
arrived whole. The fault injector sits between the two ends, so a lost frame is seen only at the
sender's end, a duplicated one twice at the receiver's, and a corrupted one valid at the sender's end and
with its bit flipped at the receiver's; the copies a fault made carry a comment saying which injector
did what. Frames still on a link when the run stops are seen at the sender's end only, and frames the
switch sends to no host of their port (``unroutable``) on no link.
"""

import heapq
import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np

from netreduce.host.faults import FaultInjector, FaultSpec
from netreduce.host.lossy import LossyWorker, lossy_layout
from netreduce.host.pcap import INBOUND, OUTBOUND, PcapNgWriter
from netreduce.host.protocol import parse_control_payload, udp_payload
from netreduce.host.rc import Endpoint, Memory, RcRequester, RcResponder, SourcePort
from netreduce.host.uc import UcRequester, UcResponder
from netreduce.host.worker import HostAddress, Worker, message_layout, tensor_dtype
from netreduce.sim.fp import get_format, random_operands, tree_sum
from netreduce.sim.switch_model import (
    ConnectionConfig,
    JobClass,
    JobConfig,
    SwitchConfig,
    SwitchModel,
    contributors_counter,
)

__all__ = ["Network", "ModelEngine", "record_frames", "Link", "build_allreduce", "expected_sum",
           "expected_partial_sum", "lossy_results_match", "lossy_report", "average_error", "default_deadline_us",
           "clocks_of_us", "WIRE_OVERHEAD", "CLOCK_NS"]

WIRE_OVERHEAD = 24      # bytes per frame on the wire besides the frame: preamble 8, FCS 4, gap 12
# the datapath clock of each width: XGMII's 156.25 MHz, the 100G CMAC's 322.265625 MHz
CLOCK_NS = {64: 6.4, 512: 1e3 / 322.265625}
LINK_GBPS = {64: 10, 512: 100}
_FRAME_HEADERS = 14 + 20 + 8 + 12 + 16 + 4 + 4      # a bounded-loss message's frame besides its payload


def _clock(clock_ns):
    """A clock period as an exact fraction of nanoseconds (6.4 = 32/5; 1/322.265625 MHz = 512/165)."""
    return Fraction(clock_ns).limit_denominator(10**6)


def clocks_of_us(us, width):
    """``us`` microseconds in clocks of the datapath of ``width`` bits, rounded up (at least 1)."""
    return max(1, math.ceil(Fraction(str(us)) * 1000 / _clock(CLOCK_NS[width])))


def default_deadline_us(*, workers, jobs=1, mtu=1024, message_slots=4, width=64):
    """The bounded-loss class's default deadline: 10 us plus twice the time one port takes to carry a
    window (K/2 messages of one MTU) of every worker of every job at the line rate of ``width``, so that
    without loss the messages of a window complete before it even when every host shares one port."""
    frames = workers * jobs * max(1, message_slots // 2)
    return 10 + 2 * frames * (mtu + _FRAME_HEADERS + WIRE_OVERHEAD) * 8 / (LINK_GBPS[width] * 1000)


class Link:
    """One direction of a switch port's cable: frames leave one after another at ``gbps`` and arrive
    ``delay_ns`` later. Every host on the port shares it."""

    def __init__(self, network, gbps, delay_ns, beat_bytes):
        self.network = network
        self.ns_per_byte = 8 / gbps
        self.delay_ns = delay_ns
        self.beat_bytes = beat_bytes
        self.free_at = 0
        self.frames = self.bytes = self.beats = 0

    def send(self, frame, deliver, *args):
        start = max(self.network.now, self.free_at)
        self.free_at = start + round((len(frame) + WIRE_OVERHEAD) * self.ns_per_byte)
        self.frames += 1
        self.bytes += len(frame)
        self.beats += -(-len(frame) // self.beat_bytes)
        self.network.at(self.free_at + self.delay_ns, deliver, *args, frame)


class ModelEngine:
    """The golden model as the switch: each frame is processed when it arrives, ``latency_ns`` later the
    frames it causes leave (into ``network``; with none, only recorded). The model's clock is the
    network's time in periods of ``clock_ns``; a bounded-loss message's deadline fires at its time, and the
    frames it causes leave ``latency_ns`` later."""

    name = "model"

    def __init__(self, config, latency_ns=200, record=False, clock_ns=CLOCK_NS[64]):
        self.model = SwitchModel(config)
        self.latency_ns = latency_ns
        self.network = None
        self.record = record
        self.clock_ns = _clock(clock_ns)
        self._wake_at = None            # when an _expire is scheduled, if one is
        # with ``record``: (port, frame) in; [(port, frame)] out; how many of those were slot results;
        # how many frames had come off the switch's egress links when the frame was sent; and the frames sent
        # at deadlines, each [(port, frame)] with the number of frames in before it
        self.inputs, self.outputs, self.results, self.after, self.expired = [], [], [], [], []

    @property
    def counters(self):
        return self.model.counters

    def inject(self, port, frame, now, after=0):
        before = self.model.counters["results_sent"]
        produced = self.model.receive(port, frame, now=self._clocks(now))
        if self.record:
            self.inputs.append((port, frame))
            self.after.append(after)
            self.outputs.append(produced)
            self.results.append(self.model.counters["results_sent"] - before)
        if self.network is None:
            return
        self._send(produced, now)
        self._schedule()

    def _clocks(self, ns):
        """The model's clock at ``ns``: the clocks of the datapath since time 0."""
        return int(ns * self.clock_ns.denominator // self.clock_ns.numerator)

    def _send(self, produced, now):
        for out_port, out_frame in produced:
            self.network.at(now + self.latency_ns, self.network.from_switch, out_port, out_frame)

    def _schedule(self):
        """Wake up at the model's next deadline (if it has one, and nothing earlier is scheduled)."""
        deadline = self.model.next_deadline
        if deadline is None:
            return
        at = max(self.network.now, -(-deadline * self.clock_ns.numerator // self.clock_ns.denominator))
        if self._wake_at is not None and self.network.now <= self._wake_at <= at:
            return
        self._wake_at = at
        self.network.at(at, self._expire)

    def _expire(self):
        now = self.network.now
        if self._wake_at is not None and self._wake_at <= now:
            self._wake_at = None
        produced = self.model.advance(self._clocks(now))
        if self.record and produced:
            self.expired.append((len(self.inputs), produced))
        self._send(produced, now)
        self._schedule()

    def recording(self):
        """What the switch testbench replays (``tb/switch_tb.py``): the configuration, the frames in, what
        the model sent for each and how many of those were slot results, how many frames had left the
        switch before each came, what it sent at deadlines (after how many frames in), the counters."""
        return {"config": self.model.config, "inputs": self.inputs, "outputs": self.outputs,
                "results": self.results, "after": self.after, "expired": self.expired,
                "counters": dict(self.counters)}


def record_frames(config, frames, port=0, ports=None):
    """:meth:`ModelEngine.recording` for hand-made ``frames``, all into ``port`` (or frame i into
    ``ports[i]``), none waiting on an earlier frame's answer, each taken by the golden model as it comes."""
    engine = ModelEngine(config, record=True)
    for index, frame in enumerate(frames):
        engine.inject(port if ports is None else ports[index], frame, 0)
    return {"status": "done", **engine.recording()}


class _Host:
    def __init__(self, network, index, address, port, faults_up, faults_down, seed):
        self.network, self.index, self.address, self.port = network, index, address, port
        self.faults_up = FaultInjector(faults_up, seed=seed, name=f"host{index}->switch")
        self.faults_down = FaultInjector(faults_down, seed=seed, name=f"switch->host{index}")
        self.memory = Memory()
        self.requesters, self.responders = {}, {}    # by local QPN
        self.workers = []
        self.stats = Counter()
        self.wakeup = None

    def receive(self, frame, now):
        from netreduce.sim.roce_model import parse_frame
        parsed = parse_frame(frame)
        h = parsed.header
        if h["roce"]:
            qpn = h["bth_dest_qp"]
            if qpn in self.requesters:
                self.requesters[qpn].receive(frame, now)
            elif qpn in self.responders:
                for reply in self.responders[qpn].receive(frame, now):
                    self.send(reply, now)
            else:
                self.stats["unknown_qp"] += 1
        elif h["ip_version"] == 4 and h["ip_proto"] == 17 and h["udp_dport"] == self.network.control_port:
            message = parse_control_payload(udp_payload(parsed.payload, h))
            if message is not None:
                for worker in self.workers:
                    worker.on_control(message, mac=h["eth_src"], ip=h["ip_src"], port=h["udp_sport"])
            self.stats["control"] += 1
        else:
            self.stats["other"] += 1
        self.service(now)

    def send(self, frame, now):
        """Out of the host: the faults of its side, then the switch port's shared ingress link."""
        self.network.capture(self, False, OUTBOUND, frame)
        ingress = self.network.ingress[self.port]
        for extra, copy in self.faults_up.apply(frame):
            self.network.at(now + extra, ingress.send, copy, self._reach_switch, self.network.switch_outputs,
                            _fault_note(self.faults_up, extra))

    def _reach_switch(self, after, note, frame):
        self.network.capture(self, True, INBOUND, frame, note)
        self.network.into_switch(self.port, after, frame)

    def from_switch(self, frame):
        """Off the port's egress link: the faults of the host's side, then the host."""
        for extra, copy in self.faults_down.apply(frame):
            self.network.at(self.network.now + extra, self._arrive, _fault_note(self.faults_down, extra), copy)

    def _arrive(self, note, frame):
        self.network.capture(self, False, INBOUND, frame, note)
        self.receive(frame, self.network.now)

    def service(self, now):
        for worker in self.workers:
            for frame in worker.pump(now):
                self.send(frame, now)
        for requester in self.requesters.values():
            for frame in requester.poll(now):
                self.send(frame, now)
        for worker in self.workers:          # completions the polls just produced
            worker.pump(now)
        timers = [t for t in itertools.chain((r.next_timer() for r in self.requesters.values()),
                                             (w.next_timer() for w in self.workers)) if t is not None]
        if timers:
            wake = max(min(timers), now + 1)
            if self.wakeup is None or wake < self.wakeup or self.wakeup <= now:
                self.wakeup = wake
                self.network.at(wake, self._wake)

    def _wake(self):
        if self.wakeup is not None and self.wakeup <= self.network.now:
            self.wakeup = None
        self.service(self.network.now)


def _fault_note(injector, extra):
    """The capture's comment on a copy that ``injector`` just let through ``extra`` ns late: what its
    fault did to it, or None for a copy as sent."""
    fault = injector.last
    if fault == "corrupt":
        return f"fault injector {injector.name}: one bit flipped, ICRC invalid"
    if fault == "duplicate" and extra:
        return f"fault injector {injector.name}: duplicate"
    if fault == "reorder":
        return f"fault injector {injector.name}: held back {extra} ns (reordered)"
    return None


class Network:
    """``hosts`` (:class:`HostAddress`, MACs distinct) on the switch's ports: host ``i`` on port
    ``host_ports[i]``, by default ``i mod P``."""

    def __init__(self, engine, switch_config, hosts, *, gbps=10, delay_ns=500, faults_up=None,
                 faults_down=None, seed=0, beat_bytes=8, pcap=None, host_ports=None):
        self.engine, self.switch_config = engine, switch_config
        self.control_port = switch_config.control_port
        self.now = 0
        self._events, self._order = [], itertools.count()
        if host_ports is None:
            host_ports = [i % switch_config.ports for i in range(len(hosts))]
        if len(host_ports) != len(hosts) or not all(0 <= p < switch_config.ports for p in host_ports):
            raise ValueError(f"host_ports {host_ports}: one port of the {switch_config.ports} for each host")
        if len({address.mac for address in hosts}) != len(hosts):
            raise ValueError("two hosts have the same MAC")
        self.hosts = [_Host(self, i, address, port, faults_up, faults_down, seed)
                      for i, (address, port) in enumerate(zip(hosts, host_ports, strict=True))]
        self.extra_hosts = []           # the hosts that carry no worker (build_allreduce's extra_hosts)
        self.taps = []                  # tap(port, frame): every frame as it leaves the switch
        self.ingress = [Link(self, gbps, delay_ns, beat_bytes) for _ in range(switch_config.ports)]
        self.egress = [Link(self, gbps, delay_ns, beat_bytes) for _ in range(switch_config.ports)]
        self._host_by_mac = {address.mac: host for address, host in zip(hosts, self.hosts, strict=True)}
        self.unroutable = 0
        self.switch_outputs = 0         # frames that have come off the egress links (or were unroutable)
        self.workers = []
        self.pcap = None if pcap is None else PcapNgWriter(pcap, [
            name for host in self.hosts for name in (f"host{host.index} (link to switch port {host.port})",
                                                     f"switch port {host.port} (link to host{host.index})")])
        engine.network = self

    def at(self, time, action, *args):
        heapq.heappush(self._events, (time, next(self._order), action, args))

    def capture(self, host, at_switch, direction, frame, note=None):
        """Record ``frame`` in the pcap, if any, at the switch's or ``host``'s end of the host's link, now."""
        if self.pcap is not None:
            self.pcap.write(2 * host.index + at_switch, frame, self.now, direction, note)

    def close(self):
        """End the pcap file, if any: nothing is captured after this."""
        if self.pcap is not None:
            self.pcap.close()
            self.pcap = None

    def into_switch(self, port, after, frame):
        self.engine.inject(port, frame, self.now, after)

    def from_switch(self, port, frame):
        """A frame leaves the switch on ``port`` now: down the port's egress link to the host that owns
        its destination MAC (a frame for no host on that port is counted as unroutable)."""
        for tap in self.taps:
            tap(port, frame)
        host = self._host_by_mac.get(int.from_bytes(frame[:6], "big"))
        if host is None or host.port != port:
            self.unroutable += 1
            self.switch_outputs += 1
            return
        self.capture(host, True, OUTBOUND, frame)
        self.egress[port].send(frame, self._delivered, host)

    def _delivered(self, host, frame):
        self.switch_outputs += 1
        host.from_switch(frame)

    @property
    def done(self):
        return all(w.done for w in self.workers)

    @property
    def failed(self):
        return [w for w in self.workers if w.failed]

    def run(self, *, time_limit_ns=10**10, progress=None):
        """Run until every worker is done, one fails, nothing is left to happen or time runs out.

        Returns ``"done"``, ``"failed"``, ``"stalled"`` (no event left: a deadlock) or ``"timeout"``.
        """
        self.start()
        while self.status is None:
            if not self._events:
                self.status = "stalled"
            elif self._events[0][0] > time_limit_ns:
                self.status = "timeout"
            else:
                self.advance(self._events[0][0], progress)
        return self.status

    def start(self):
        """Let every host start (its first service); ``status`` is ``None`` until the run is over."""
        self.status = None
        for host in self.hosts:
            self.at(self.now, host.service, self.now)

    def advance(self, until_ns, progress=None):
        """Handle every event up to ``until_ns`` (an engine that keeps its own time, like a simulator,
        calls this as its time passes). Sets and returns ``status`` once every worker is done or one failed."""
        while self._events and self._events[0][0] <= until_ns:
            time, _, action, args = heapq.heappop(self._events)
            self.now = time
            action(*args)
            if progress is not None:
                progress(self)
            if self.done:
                self.status = "done"
                return self.status
            if self.failed:
                self.status = "failed"
                return self.status
        self.now = max(self.now, until_ns)
        return self.status

    def summary(self):
        up, down = self.ingress, self.egress
        faults = Counter()
        for host in self.hosts:
            for side, injector in (("up", host.faults_up), ("down", host.faults_down)):
                for kind, count in injector.counts.items():
                    faults[f"{side}_{kind}"] += count
        retransmissions = sum(r.stats.get("retransmitted_packets", 0)
                              for host in self.hosts for r in host.requesters.values())
        counters = dict(self.engine.counters)
        lossy = [w for w in self.workers if isinstance(w, LossyWorker)]
        summary = {
            "status": self.status,
            "time_ns": self.now,
            "host_to_switch": {"packets": sum(link.frames for link in up), "bytes": sum(link.bytes for link in up),
                               "beats": sum(link.beats for link in up)},
            "switch_to_host": {"packets": sum(link.frames for link in down), "bytes": sum(link.bytes for link in down),
                               "beats": sum(link.beats for link in down)},
            "retransmissions": retransmissions,
            "credit_requests": sum(w.credit_requests for w in self.workers),
            "drops": {**{k: v for k, v in counters.items() if k.startswith("drop_")}, **dict(faults),
                      "unroutable": self.unroutable},
            "switch": counters,
            "errors": [e for w in self.workers for e in w.errors]
                      + [f"job {w.job.job} worker {w.index}: {w.requester.error}"
                         for w in self.workers if w.requester.error],
        }
        if lossy:
            elements = sum(w.elements for w in lossy)
            filled = sum(w.zero_filled_elements for w in lossy)
            workers = max(w.job.workers for w in lossy)
            model = getattr(self.engine, "model", None)
            if model is not None:
                histogram = {str(n): model.contributors[n] for n in range(workers + 1)}
            else:       # the switch's counters: exact up to 7 contributors
                histogram = {str(n): counters.get(contributors_counter(n), 0) for n in range(min(workers, 7) + 1)}
                if workers >= 8:
                    histogram["8_or_more"] = counters.get(contributors_counter(8), 0)
            summary["lossy"] = {
                "zero_filled_elements": filled, "recovered": sum(w.recovered for w in lossy),
                "result_requests": sum(w.result_requests for w in lossy),
                "loss_fraction": round(filled / elements, 6) if elements else 0.0,
                "contributors_histogram": histogram,
            }
        return summary


def expected_sum(job, inputs):
    """The golden model's all-reduce of ``inputs`` (workers x elements bit patterns): the tree sum."""
    if inputs.shape[1] == 0:
        return np.zeros(0, dtype=inputs.dtype)
    return tree_sum(get_format(job.dtype), inputs, ftz=job.ftz).astype(inputs.dtype)


def expected_partial_sum(job, inputs, contributors):
    """The bounded-loss all-reduce of ``inputs`` (workers x elements bit patterns) that a result whose
    elements have the bitmaps ``contributors`` must hold: each element the tree sum of exactly its
    contributors (an absent leaf passes its sibling through), +0 where there is none."""
    if inputs.shape[1] == 0:
        return np.zeros(0, dtype=inputs.dtype)
    mask = (np.asarray(contributors, dtype=np.uint32)[None, :] >> np.arange(inputs.shape[0], dtype=np.uint32)[:, None]
            ) & 1
    return tree_sum(get_format(job.dtype), inputs, mask=mask.astype(bool), ftz=job.ftz).astype(inputs.dtype)


def lossy_results_match(network, inputs):
    """A bounded-loss run's check: every worker's result, element by element, the tree sum of exactly the
    contributors its bitmaps name (:func:`expected_partial_sum`)."""
    return bool(all(np.array_equal(w.result, expected_partial_sum(w.job, inputs[w.job.job], w.contributors))
                    for w in network.workers))


def lossy_report(network, inputs, summary, options):
    """The figures of a bounded-loss run (``summary``: ``network.summary()``; ``options``: its
    ``build_allreduce`` options): the deadline, loss bound and rescaling it ran with, the switch's deadline
    completions and late contributions, the workers' figures (``summary["lossy"]``), and the average error."""
    return {"deadline_us": options["deadline_us"], "loss_bound": options["loss_bound"],
            "rescale": options["rescale"], "deadline_completions": summary["switch"]["deadline_completions"],
            "late": summary["switch"]["late"], **summary["lossy"], "average_error": average_error(network, inputs)}


def average_error(network, inputs):
    """The relative RMS error of the workers' averages (rescaled or not) against the mean of every input,
    over the elements where all of them are finite: what the loss and the rescaling do to the gradient that
    training sees. ``None`` when no element qualifies or the mean is 0."""
    from netreduce.sim.fp import to_float64
    errors, scale = 0.0, 0.0
    for w in network.workers:
        values = to_float64(get_format(w.job.dtype), inputs[w.job.job])
        with np.errstate(all="ignore"):
            truth = values.mean(axis=0)
            average = w.average()
            finite = np.isfinite(values).all(axis=0) & np.isfinite(truth) & np.isfinite(average)
            errors += float(np.sum((average[finite] - truth[finite]) ** 2))
            scale += float(np.sum(truth[finite] ** 2))
    if not scale or not np.isfinite(errors) or not np.isfinite(scale):
        return None
    return round(float(np.sqrt(errors / scale)), 6)


def build_allreduce(*, workers=2, nbytes=4096, mtu=1024, dtype="fp32", jobs=1, ports=1, message_packets=4,
                    message_slots=4, seed=0, inputs=None, faults_up=None, faults_down=None, engine=None,
                    width=64, delay_ns=500, timeout_ns=1_000_000, retry_limit=7, max_outstanding=64,
                    credit_timeout_ns=None, start_psn=None, start_msg=0, extra_hosts=(), pcap=None,
                    class_map=None, source_port=None, traffic_class=JobClass.RELIABLE, deadline_us=None,
                    loss_bound=0.01, rescale=True, result_timeout_ns=None, layers=None, ipv6=True):
    """Jobs of ``workers`` workers each all-reducing ``nbytes`` bytes, around a switch engine (the golden
    model unless ``engine`` is a factory taking the :class:`SwitchConfig`). ``inputs``: ``{job: array
    (workers, elements)}`` of bit patterns, else random gradients from ``seed``. ``start_psn``: the first PSN
    of worker ``w``'s connection is ``start_psn + 7 w`` (modulo 2^24), random from ``seed`` if ``None``;
    ``start_msg``: every job's first message sequence number. Worker ``w``'s host is host ``w``, on port
    ``w mod ports``, and each connection is bound to its hosts' ports, untagged. ``extra_hosts``:
    ``[(HostAddress, port), ...]``, hosts that carry no worker (``network.extra_hosts``, after the workers'
    in ``network.hosts``), in the forwarding table. ``pcap``: a file to capture every frame in (module
    documentation). ``class_map`` (:class:`netreduce.host.classify.ClassMap`): the workers' RC traffic
    carries its reliable class in the DSCP; ``source_port``: the queue pairs' UDP source ports
    (:class:`netreduce.host.rc.SourcePort`; ``FIXED`` by default, ``PER_PACKET`` for the bounded-loss class).

    ``traffic_class="lossy"`` (or :attr:`JobClass.LOSSY`): every job is of the bounded-loss class, its workers
    :class:`~netreduce.host.lossy.LossyWorker` s on UC queue pairs, with the job's deadline ``deadline_us``
    (in clocks of ``width``; :func:`default_deadline_us` when ``None``), the workers' ``loss_bound``,
    ``rescale`` and ``result_timeout_ns`` (twice the deadline and 50 us when ``None``; a request's timeout
    is the deadline and 20 us; the credit timeout, when ``credit_timeout_ns`` is ``None``, the deadline
    rather than 1 ms, so that a worker whose CREDIT and result were lost falls behind by about a deadline
    and no more), their messages
    classified by ``class_map`` (the default map when ``None``) over ``layers`` (``[(name, size), ...]``
    per worker's tensor; the whole tensor when ``None``). Every receiver of a job keeps its results at one
    address. ``traffic_class`` may also be a list of one class per job (the jobs of both classes share the
    switch). ``ipv6``: the switch parses RoCE over IPv6 (``SwitchConfig.ipv6``). Returns ``(network, jobs,
    inputs)``."""
    rng = np.random.default_rng(seed)
    fmt = get_format(dtype)
    hosts = [HostAddress(0x02_00_00_00_00_01 + h, f"10.0.{h // 250}.{h % 250 + 1}") for h in range(workers)]
    host_ports = [h % ports for h in range(workers)]
    for address, port in extra_hosts:
        hosts.append(address)
        host_ports.append(port)
    switch_mac, switch_ip = 0x02_4E_52_00_00_01, "10.0.255.1"
    if isinstance(traffic_class, (list, tuple)):
        classes = [JobClass(c) for c in traffic_class]
        if len(classes) != jobs:
            raise ValueError(f"{len(classes)} traffic classes for {jobs} jobs")
    else:
        classes = [JobClass(traffic_class)] * jobs
    ports_of_class = {cls: source_port if source_port is not None
                      else SourcePort.PER_PACKET if cls is JobClass.LOSSY else SourcePort.FIXED for cls in JobClass}
    deadline, credit_timeouts = {}, dict.fromkeys(JobClass, credit_timeout_ns or 1_000_000)
    if JobClass.LOSSY in classes:
        if deadline_us is None:
            deadline_us = default_deadline_us(workers=workers, jobs=jobs, mtu=mtu, message_slots=message_slots,
                                              width=width)
        deadline = {"traffic_class": JobClass.LOSSY, "deadline_clocks": clocks_of_us(deadline_us, width)}
        if result_timeout_ns is None:
            result_timeout_ns = round(2 * deadline_us * 1000) + 50_000
        request_timeout_ns = round(deadline_us * 1000) + 20_000
        if credit_timeout_ns is None:
            credit_timeouts[JobClass.LOSSY] = max(1000, round(deadline_us * 1000))
    job_configs = [JobConfig(job=j, workers=workers, dtype=dtype, mtu=mtu, message_packets=message_packets,
                             message_slots=message_slots, start_msg=start_msg,
                             **(deadline if classes[j] is JobClass.LOSSY else {})) for j in range(jobs)]
    qpn = itertools.count(0x100)
    plans = []      # (job, worker, requester qpn, responder qpn, start psn)
    for job in job_configs:
        for w in range(workers):
            psn = int(rng.integers(0, 1 << 24)) if start_psn is None else (start_psn + 7 * w) % (1 << 24)
            plans.append((job, w, next(qpn), next(qpn), psn))
    connections = [ConnectionConfig(job.job, w, hosts[w].mac, hosts[w].ip, rq,
                                    hosts[(w + 1) % workers].mac, hosts[(w + 1) % workers].ip, rs, psn,
                                    requester_port=host_ports[w], responder_port=host_ports[(w + 1) % workers],
                                    responder_rkey=0x1000 + rs if job.lossy else None)
                   for job, w, rq, rs, psn in plans]
    config = SwitchConfig(mac=switch_mac, ip=switch_ip, ports=ports,
                          forwarding={h.mac: port for h, port in zip(hosts, host_ports, strict=True)},
                          jobs=job_configs, connections=connections, ipv6=ipv6)
    engine = engine(config) if engine is not None else ModelEngine(config, clock_ns=CLOCK_NS[width])
    network = Network(engine, config, hosts, gbps=LINK_GBPS[width], delay_ns=delay_ns,
                      faults_up=faults_up or FaultSpec(), faults_down=faults_down or FaultSpec(), seed=seed,
                      beat_bytes=width // 8, pcap=pcap, host_ports=host_ports)
    network.extra_hosts = network.hosts[workers:]
    element = tensor_dtype(dtype)
    elements = nbytes // element.itemsize
    if inputs is None:
        inputs = {job.job: random_operands(fmt, workers * elements, rng).astype(element)
                  .reshape(workers, elements) for job in job_configs}
    switch = HostAddress(switch_mac, switch_ip)
    layer_sizes = [elements] if layers is None else [size for _, size in layers]
    for job, w, rq, rs, psn in plans:
        sender, peer = network.hosts[w], network.hosts[(w + 1) % workers]
        source_port = ports_of_class[job.traffic_class]
        if job.lossy:
            _lossy_queue_pairs(job, sender, peer, rq, rs, psn, len(lossy_layout(job, layer_sizes)), source_port)
            continue
        stride = job.message_packets * job.mtu
        size = max(1, len(message_layout(job, elements))) * stride
        rkey = 0x1000 + rs
        recv_va = 0x10_0000_0000 * (job.job + 1) + 0x1_0000_0000 * w
        peer.memory.register(recv_va, size, rkey)
        requester = RcRequester(Endpoint(sender.address.mac, sender.address.ip, rq),
                                Endpoint(peer.address.mac, peer.address.ip, rs), start_psn=psn, mtu=mtu,
                                max_outstanding=max_outstanding, timeout_ns=timeout_ns,
                                retry_limit=retry_limit, source_port=source_port)
        responder = RcResponder(Endpoint(peer.address.mac, peer.address.ip, rs),
                                Endpoint(sender.address.mac, sender.address.ip, rq), start_psn=psn,
                                mtu=mtu, memory=peer.memory, source_port=source_port)
        sender.requesters[rq] = requester
        peer.responders[rs] = responder
    # the worker on host w sends on its own connection and receives on connection w - 1
    by_plan = {(job.job, w): (rq, rs) for job, w, rq, rs, _ in plans}
    for job in job_configs:
        data = np.asarray(inputs[job.job], dtype=element)
        if data.shape[0] != workers:
            raise ValueError(f"job {job.job}: {data.shape[0]} input tensors for {workers} workers")
        if data.shape[1] != elements:
            raise ValueError(f"job {job.job}: input tensors of {data.shape[1]} elements for nbytes={nbytes} "
                             f"({elements} elements)")
        for w in range(workers):
            host = network.hosts[w]
            rq, rs_out = by_plan[(job.job, w)]
            _, rs_in = by_plan[(job.job, (w - 1) % workers)]
            credit_timeout_ns = credit_timeouts[job.traffic_class]
            if job.lossy:
                worker = LossyWorker(job, w, data[w], requester=host.requesters[rq], responder=host.responders[rs_in],
                                     memory=host.memory, result_va=_result_va(job), send_rkey=0x1000 + rs_out,
                                     host=host.address, switch=switch, control_port=config.control_port,
                                     receive_connection=(w - 1) % workers, layers=layers, class_map=class_map,
                                     credit_timeout_ns=credit_timeout_ns, result_timeout_ns=result_timeout_ns,
                                     request_timeout_ns=request_timeout_ns, loss_bound=loss_bound,
                                     rescale=rescale)
                host.workers.append(worker)
                network.workers.append(worker)
                continue
            worker = Worker(job, w, data[w], requester=host.requesters[rq], responder=host.responders[rs_in],
                            memory=host.memory, send_va=0x10_0000_0000 * (job.job + 1) + 0x1_0000_0000 * w,
                            send_rkey=0x1000 + rs_out, recv_va=0x10_0000_0000 * (job.job + 1)
                            + 0x1_0000_0000 * ((w - 1) % workers), host=host.address, switch=switch,
                            control_port=config.control_port, credit_timeout_ns=credit_timeout_ns,
                            class_map=class_map)
            host.workers.append(worker)
            network.workers.append(worker)
    return network, job_configs, {job.job: np.asarray(inputs[job.job], dtype=element) for job in job_configs}


def _result_va(job):
    """Where every receiver of a bounded-loss job keeps its results (message i at ``+ i * mtu``)."""
    return 0x10_0000_0000 * (job.job + 1)


def _lossy_queue_pairs(job, sender, peer, rq, rs, psn, messages, source_port):
    """Connection ``rq`` -> ``rs`` of a bounded-loss job: a UC requester on ``sender``, a UC responder and
    its result buffer (at the job's one address, under the R_Key the switch is configured with) on ``peer``."""
    peer.memory.register(_result_va(job), max(1, messages) * job.mtu, 0x1000 + rs)
    sender.requesters[rq] = UcRequester(Endpoint(sender.address.mac, sender.address.ip, rq),
                                        Endpoint(peer.address.mac, peer.address.ip, rs), start_psn=psn,
                                        mtu=job.mtu, source_port=source_port)
    peer.responders[rs] = UcResponder(Endpoint(peer.address.mac, peer.address.ip, rs),
                                      Endpoint(sender.address.mac, sender.address.ip, rq), memory=peer.memory,
                                      start_psn=psn, mtu=job.mtu)
