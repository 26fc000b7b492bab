"""amaranth.sim unit test of hw/switch/monitor.py (``StatusMonitor``) against the golden model.

The monitor decides each frame's fate (rules 1 to 9 of docs/ARCHITECTURE.md, "Switch behaviour, per received
frame"; ``SwitchModel.receive``) and says what leaves as descriptors, in commit order. Here it runs behind its
real neighbours (``RoceParser``, ``ConnectionMatch``, ``SwitchRegisters``, configured through the register map
as the host library does) on a scenario of both traffic classes: complete messages, a retransmission, a gap, a
bad aggregation header, ACKs that release a message, credit and result requests (from the worker's host and
from another), a forged frame, a bad ICRC, a bad IPv4 header checksum (a frame of each class), a write out of
its message's sequence, a bounded-loss frame of another opcode, traffic of no connection. Frames are offered
with idle clocks, descriptors taken with backpressure. Checked against the model fed the same frames:

- every counter but ``frames_out`` (which the emitter counts): the reason each frame was counted under;
- the frames the descriptors stand for, in order, by kind (a frame that goes on, a sum to a receiver, a
  CREDIT), against the model's frames out;
- one sum request for each RESULTS descriptor that is not a resend, with the contributors' mask;
- through the header records (``HeaderRecords``, which applies each frame's fate): the header record of each
  frame that goes on, and the stored header of each contribution the model keeps, in order, and one
  ``stored`` for each RESULTS descriptor that is not a resend.

A second scenario acknowledges the reliable job's messages with ACKs back to back (no idle clock), the same
checks; at 512 bits, where an ACK is one beat, each run of ACKs must take one clock an ACK. A third sends
bounded-loss contributions back to back, the same checks; at 512 bits each contribution's clocks after its last
beat are counted (``test_back_to_back_contributions``). A fourth restarts the bounded-loss job in the clocks
around a contribution's last beat: the restart applies after that frame. Last, a bounded-loss connection
restarted beside results whose PSNs were read before it: they keep the sequence before it (the monitor with
the emitter's part played, and with the real emitter); a contribution that waits at its key beat for a
bank whose sum's results are not yet sent; and the smallest frames behind a stall, never more of them between
the parser's input and the monitor than ``Deadlines`` holds arrival stamps for.
"""

import collections
import random

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from netreduce.host.packets import build_ack
from netreduce.host.protocol import AggHeader, ip_to_int
from netreduce.hw.egress import EgressQueues
from netreduce.hw.parser import RoceParser
from netreduce.hw.switch.deadlines import Deadlines
from netreduce.hw.switch.emitter import Emission, Emitter, StoredHeader, stored_header_fields
from netreduce.hw.switch.match import ConnectionMatch
from netreduce.hw.switch.monitor import StatusMonitor
from netreduce.hw.switch.records import HeaderRecords
from netreduce.hw.switch.registers import SwitchRegisters
from netreduce.registers import COUNTERS, register_writes, switch_config_writes
from netreduce.sim.amaranth_streams import collect_records, run, send_frames, send_records, shared_simulator
from netreduce.sim.roce_model import parse_frame
from netreduce.wire import AGG_HEADER_BYTES, CONTROL_PORT, ETH_MIN_FRAME, RC_WRITE_OPCODES, RESULT_RESENDS, ControlType

from references import JOB, RC_WRITE_ONLY, SWITCH_IP, Fabric, elements, write_registers

WORKERS, PORTS, SLOTS, PACKETS, MTU = 3, 2, 4, 4, 64
MAX_FRAME = 1024        # the monitor's and the model's
RELIABLE = JOB + 1


class MonitorBench(Elaboratable):
    """Parser, header records, connection match and registers around the monitor, as in the switch. The
    testbench gives each frame's ingress port (``match.port``, in frame order) and plays the emitter's part
    (``ring_read``, and taking the records of the frames that go on)."""

    def __init__(self, width, mtu=MTU, bounded_loss=True):
        self.parser = RoceParser(width)
        # (as the switch builds it: where a frame is 8 beats at least, the connections compared in steps)
        self.match = ConnectionMatch(jobs=2, workers=WORKERS, ports=PORTS,
                                     header_clocks=-(-ETH_MIN_FRAME // (width // 8)))
        self.monitor = StatusMonitor(width=width, workers=WORKERS, jobs=2, dtype="fp32", mtu=mtu,
                                     message_packets=PACKETS, message_slots=SLOTS, max_frame=MAX_FRAME, ports=PORTS,
                                     increment_bits=(WORKERS + 1).bit_length(), bounded_loss=bounded_loss)
        self.records = HeaderRecords(store_entries=2 * SLOTS * PACKETS * WORKERS)
        egress = EgressQueues(width, queues=2, depth_beats=4096 // (width // 8), max_frame=1200)
        egress._MustUse__silence = True         # its layouts only: the registers hold its configuration
        self.registers = SwitchRegisters(jobs=2, workers=WORKERS, forwarding_entries=4, mtu=mtu,
                                         increment_bits=(WORKERS + 1).bit_length(), egress=egress, ports=PORTS,
                                         bounded_loss=bounded_loss)

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser, m.submodules.match = self.parser, self.match
        m.submodules.monitor, m.submodules.registers = self.monitor, self.registers
        m.submodules.records = records = self.records
        parser, match, monitor, regs = self.parser, self.match, self.monitor, self.registers
        wiring.connect(m, parser.hdr, records.i)
        wiring.connect(m, records.o, match.header)
        wiring.connect(m, monitor.fates, records.fates)
        wiring.connect(m, match.o, monitor.frames)
        wiring.connect(m, parser.o, monitor.payload)
        m.d.comb += [match.switch.eq(regs.switch), match.jobs.eq(regs.jobs),
                     match.connection_write.eq(regs.connection_write),
                     monitor.jobs.eq(regs.jobs), monitor.connections.eq(regs.connections),
                     monitor.job_enabled.eq(regs.job_enabled), monitor.connection_enabled.eq(regs.connection_enabled),
                     monitor.arrival.eq(parser.i.valid & parser.i.ready & parser.i.payload.first)]
        m.d.comb += [regs.increments[name].eq(monitor.increments[name]) for name in COUNTERS]
        return m


def builders(fabric, frames, rng):
    """Functions that append ``(port, frame)`` to ``frames``: ``data(w, seq, psn_offset)``, worker w's
    contribution to message ``seq`` (of the reliable job, at its connection's start PSN plus ``psn_offset``,
    unless told otherwise), and ``ack(w, psn_offset)``, its responder's ACK of the result at that PSN."""
    def data(w, seq, psn_offset, *, job=RELIABLE, header=None, port=None, n=8, **fields):
        conn = fabric.conns[job, w]
        values = elements(rng, n)
        if job == RELIABLE:
            fields = {"opcode": RC_WRITE_ONLY, "psn": conn.start_psn + psn_offset, **fields}
        frames.append((conn.requester_port if port is None else port,
                       fabric.contribution(w, seq, values, job=job, header=header, **fields)))

    def ack(w, psn_offset):
        conn = fabric.conns[RELIABLE, w]
        frames.append((conn.responder_port, build_ack(conn.start_psn + psn_offset, 1, eth_src=conn.responder_mac,
                                                      eth_dst=conn.requester_mac, src_ip=conn.responder_ip,
                                                      dst_ip=conn.requester_ip, dest_qp=conn.requester_qpn)))
    return data, ack


def fabric_of(**options):
    """The tests' fabric: ``WORKERS`` workers on ``PORTS`` ports, ``SLOTS`` message slots, the monitor's
    ``MAX_FRAME``."""
    return Fabric(workers=WORKERS, ports=PORTS, slots=SLOTS, max_frame=MAX_FRAME, **options)


def corrupted(frame):
    """``frame`` with its ICRC wrong."""
    return frame[:-1] + bytes([frame[-1] ^ 1])


def bad_checksum(frame):
    """``frame`` (IPv4, tagged or not) with its IPv4 header checksum wrong and its ICRC still right (the ICRC
    masks the checksum with ones)."""
    ip = 18 if frame[12:14] == b"\x81\x00" else 14
    assert frame[ip - 2:ip] == b"\x08\x00"
    at = ip + 10                                # the header checksum's first byte
    bad = frame[:at] + bytes([frame[at] ^ 1]) + frame[at + 1:]
    verdict = parse_frame(bad).verdict
    assert verdict["icrc_ok"] and not verdict["ipv4_csum_ok"]
    return bad


NOT_ROCE = bytes.fromhex("ffffffffffff020000000001") + b"\x08\x06" + bytes(46)


def scenario():
    """``(port, frame)`` of each frame, and the fabric (a bounded-loss job ``JOB`` and a reliable job
    ``RELIABLE`` of 3 workers each; host h on port h mod 2)."""
    fabric = fabric_of(deadline=1 << 30, reliable_too=True)
    frames = []
    data, ack = builders(fabric, frames, np.random.default_rng(3))

    for w in range(WORKERS):                    # a bounded-loss message, complete: results, then credits
        data(w, 0, 0, job=JOB)
    data(0, 0, 0, job=JOB)                      # again: dropped, its bit is set
    for w in range(WORKERS):                    # a reliable message, complete: results
        data(w, 0, 0)
    data(1, 0, 0)                               # a retransmission: the sum again
    data(2, 1, 5)                               # a gap: goes on, its PSN shifted
    data(0, 1, 1, header=AggHeader(RELIABLE, 1, 8, magic=0x1234))        # a bad aggregation header
    data(1, 1, 1, port=1 - fabric.conns[RELIABLE, 1].requester_port)     # forged: the wrong port
    for w in range(WORKERS):                    # every receiver acknowledges: the message is released
        ack(w, 0)
    frames.append((0, fabric.request(0, 0, ControlType.CREDIT_REQUEST, src=0, job=RELIABLE)))
    for _ in range(RESULT_RESENDS + 1):         # worker 1's receiver (host 2) asks for message 0 again: the
        frames.append((0, fabric.request(1, 0)))    # result goes again, then (past RESULT_RESENDS) is refused
    # the same requests from a host that is not the worker's (on the same port): refused
    frames.append((0, fabric.request(0, 0, ControlType.CREDIT_REQUEST, src=2, job=RELIABLE)))
    frames.append((0, fabric.request(1, 0, src=0)))
    frames.append((0, fabric.request(1, 0)[:50]))       # cut short of its control message: refused
    port, frame = frames[0]
    frames.append((port, corrupted(frame)))     # a bad ICRC
    # the IPv4 header checksum wrong, the ICRC right: dropped (drop_bad_checksum), worker 0's next message of the
    # reliable job (in sequence, decided as a frame of its connection), and worker 0's and 2's of the bounded-loss
    # job (in LOSSY: two, against its one bad ICRC above, so that the two reasons swapped would not count the same)
    for job, w in ((RELIABLE, 0), (JOB, 0), (JOB, 2)):
        data(w, 1, 1, job=job)
        frames[-1] = (frames[-1][0], bad_checksum(frames[-1][1]))
    # worker 1's next PSN, but a MIDDLE with no FIRST before it: out of its message's sequence, goes on
    # (passthrough_sequence)
    data(1, 1, 1, opcode=RC_WRITE_OPCODES["MIDDLE"], reth=None)
    # bound to worker 1's bounded-loss connection, but not a UC WRITE ONLY with immediate (0x2B): goes on
    # (passthrough_opcode)
    data(1, 1, 0, job=JOB, opcode=RC_WRITE_ONLY)
    for job in (JOB, RELIABLE):                 # longer than max_frame, its ICRC wrong too: oversize all the same
        data(2, 1, 1, job=job, n=300)
        frames[-1] = (frames[-1][0], corrupted(frames[-1][1]))
    frames.append((0, NOT_ROCE))
    conn = fabric.conns[RELIABLE, 0]
    for psn in (7, 8, 9):                       # RoCE of no connection, one payload beat each: forwarded
        frames.append((conn.responder_port, build_ack(psn, 1, eth_src=conn.responder_mac, eth_dst=conn.requester_mac,
                                                      src_ip=conn.responder_ip, dst_ip=conn.requester_ip,
                                                      dest_qp=0xABCDE)))
    return fabric, frames


def model_kinds(fabric, frames, restart_before=None):
    """The model's frames out, in order, each as the kind of descriptor that stands for it; the parsed
    header of each frame that goes on; the stored header of each contribution the model keeps. With
    ``restart_before``, the jobs start afresh (an enable written) before that frame."""
    kinds, forwarded, contributions = [], [], []
    for index, (port, frame) in enumerate(frames):
        if index == restart_before:
            fabric.switch._configure(fabric.config)         # as a job's enable written, in the model
        before = dict(fabric.switch.counters)
        out = fabric.send(frame, port)
        reason = [name for name in COUNTERS if name not in ("frames_in", "frames_out", "results_sent",
                                                              "credits_sent", "acks_seen")
                  and fabric.switch.counters[name] != before[name]]
        if "aggregated" in reason:
            contributions.append(stored_header_fields(parse_frame(frame).header))
        for _, sent in out:
            h = parse_frame(sent).header
            if h["ip_src"] == ip_to_int(SWITCH_IP) and h["udp_dport"] == CONTROL_PORT:
                kinds.append("credit")
            elif reason and reason[0] in ("forwarded", "passthrough_gap", "passthrough_stale",
                                          "passthrough_sequence", "passthrough_opcode"):
                kinds.append("forward")
                forwarded.append(h)
            else:
                kinds.append("result")
    return kinds, forwarded, contributions


def descriptor_kinds(descriptors):
    """The frames the descriptors stand for, in order, by kind."""
    kinds = []
    for d in descriptors:
        kind, copies = Emission(d.kind), int(d.workers) if d.all else 1
        kinds += {Emission.FORWARD: ["forward"], Emission.DUPLICATE: ["result"],
                  Emission.RESULTS: ["result"] * copies, Emission.CREDITS: ["credit"] * copies}[kind]
    return kinds


def record_descriptors(descriptors):
    """The descriptors that stand for a frame whose header record goes on (forwarded, or a duplicate's answer)."""
    return [d for d in descriptors if Emission(d.kind) in (Emission.FORWARD, Emission.DUPLICATE)]


def sum_descriptors(descriptors):
    """The RESULTS descriptors that come with a sum request (every one but a resend)."""
    return [d for d in descriptors if Emission(d.kind) is Emission.RESULTS and not d.resend]


def configured_senders(bench, fabric, frames, width, idle=0, configured=None):
    """The bench's two sources: the switch's configuration written (then an item appended to ``configured``),
    then ``frames`` (``(port, frame)`` each) offered to the parser and their ports to the match, with ``idle``
    clocks between them."""
    configured = [] if configured is None else configured

    async def configure_then_send(ctx):
        await write_registers(ctx, bench.registers.csr, switch_config_writes(fabric.config, WORKERS))
        await ctx.tick().repeat(2)
        configured.append(True)
        await send_frames(bench.parser.i, [frame for _, frame in frames], width // 8, idle=idle, seed=4)(ctx)

    async def send_ports(ctx):
        while not configured:
            await ctx.tick()
        await send_records(bench.match.port, [port for port, _ in frames], idle=idle / 2, seed=5)(ctx)

    return [configure_then_send, send_ports]


def emitter_part(bench, descriptors=None, headers=None, *, backpressure=0.0, hold=0, results_delay=0,
                 sent_at=None):
    """The emitter's part, two processes: take descriptors (into ``descriptors``), with ``backpressure`` and none
    in the first ``hold`` clocks; read each FORWARD frame's words out of the packet ring (its read pointer moves
    on by the frame's beats); report each RESULTS descriptor's message sent ``results_delay`` clocks after it is
    taken (the clock of each report, from the start of the run, into ``sent_at``: message, its clocks); and take
    the header record of each frame that goes on (into ``headers``), with ``backpressure``. Without the records
    taken, the records' fates queue fills and the monitor stops committing."""
    monitor = bench.monitor

    async def take(ctx):
        rng, read, due, clock = random.Random(6), 0, [], hold
        if hold:
            await ctx.tick().repeat(hold)
        while True:
            ready = rng.random() >= backpressure
            ctx.set(monitor.descriptors.ready, ready)
            ctx.set(monitor.results_sent.valid, 0)
            if ready and ctx.get(monitor.descriptors.valid):
                d = ctx.get(monitor.descriptors.payload)
                if descriptors is not None:
                    descriptors.append(d)
                if Emission(d.kind) is Emission.FORWARD:
                    read += int(d.beats)
                    ctx.set(monitor.ring_read, read % (1 << len(monitor.ring_read)))
                if Emission(d.kind) is Emission.RESULTS:
                    due.append((clock + results_delay, int(d.job) * SLOTS + int(d.k)))
            if due and due[0][0] <= clock:
                _, message = due.pop(0)
                ctx.set(monitor.results_sent, {"valid": 1, "message": message})
                if sent_at is not None:
                    sent_at.setdefault(message, []).append(clock)
            clock += 1
            await ctx.tick()
    return [take, collect_records(bench.records.headers, [] if headers is None else headers,
                                  backpressure=backpressure, seed=7)]


def run_against_model(width, fabric, frames, *, idle, backpressure, hold=0, mtu=MTU, restart=None,
                      restart_timing=None, bounded_loss=True):
    """Send ``frames`` (``(port, frame)`` each) through the bench (built for ``mtu``), offered with ``idle``
    clocks and taken with ``backpressure`` (none taken in the first ``hold`` clocks), and check it against the
    model fed the same frames: every counter but ``frames_out``, the descriptors' kinds in order, each forwarded
    frame's header record, each sum request. With ``restart = (i, clocks, writes)``, the register ``writes``
    (enables) are written, one a clock, from that many clocks after the clock frame i's first payload beat goes
    into the monitor, and the model's jobs start afresh after frame i (the frame the monitor holds then).
    Returns the model's counters, the clock (from the start of the run) of each frame's last payload beat into
    the monitor, in frame order, and with ``restart``, the clock of the first write, those the monitor saw an
    enable in, and those it took each header from ``frames`` in; ``restart_timing`` is called with the last two
    before anything is compared (the comparison holds only where the restart fell after frame i). Without
    ``bounded_loss`` the bench's monitor and registers are built without that class."""
    bench, sim = shared_simulator(("monitor", width, mtu, bounded_loss),
                                  lambda: MonitorBench(width, mtu, bounded_loss))
    monitor, regs = bench.monitor, bench.registers
    descriptors, headers, requests, configured = [], [], [], []

    restarted_at = []

    async def restart_job(ctx):
        """``restart[2]`` written from ``restart[1]`` clocks after frame ``restart[0]``'s first payload beat."""
        index, clocks, writes = restart
        clock, frames_done, first_seen = 0, 0, False
        while True:
            payload = monitor.payload
            if configured and not first_seen and frames_done == index and ctx.get(payload.valid) \
                    and ctx.get(payload.ready):
                first_seen = True
                if clocks:
                    await ctx.tick().repeat(clocks)
                clock += clocks
                restarted_at.append(clock)
                await write_registers(ctx, regs.csr, writes)
                return
            if ctx.get(payload.valid) and ctx.get(payload.ready) and ctx.get(payload.payload.last):
                frames_done += 1
            clock += 1
            await ctx.tick()

    counters_now, last_beats, stored_headers, stored, header_takes, enabled_at = [], [], [], [], [], []

    async def watch(ctx):
        """The counters, the clock of each frame's last payload beat taken by the monitor and of each header
        taken from ``frames``, of each enable, the header store's writes and the ``stored`` strobes."""
        clock = 0
        records = bench.records
        while True:
            counters_now[:] = [ctx.get(regs.counters[i]) for i in range(len(COUNTERS))]
            payload = monitor.payload
            if ctx.get(payload.valid) and ctx.get(payload.ready) and ctx.get(payload.payload.last):
                last_beats.append(clock)
            if ctx.get(monitor.frames.valid) and ctx.get(monitor.frames.ready):
                header_takes.append(clock)
            if ctx.get(monitor.job_enabled) or ctx.get(monitor.connection_enabled):
                enabled_at.append(clock)
            if ctx.get(records.store_write.en):
                value = ctx.get(records.store_write.data)
                stored_headers.append({name: int(getattr(value, name)) for name in StoredHeader.members})
            stored.append(ctx.get(records.stored))
            clock += 1
            await ctx.tick()

    expected_kinds, expected_forwarded, expected_stored = model_kinds(fabric, frames,
                                                                      restart and restart[0] + 1)
    settled = []

    def done():
        """Every frame in, every frame's descriptors out and the header record and sum request each of them
        stands for, and then the clocks a frame's reason takes to be counted (two after its commit)."""
        if counters_now and counters_now[COUNTERS.index("frames_in")] == len(frames) and \
                len(descriptor_kinds(descriptors)) >= len(expected_kinds) and \
                len(headers) >= len(record_descriptors(descriptors)) and \
                len(requests) >= len(sum_descriptors(descriptors)):
            settled.append(True)
        return len(settled) > 4
    run(bench, [*configured_senders(bench, fabric, frames, width, idle, configured),
                *([restart_job] if restart else [])],
        [*emitter_part(bench, descriptors, headers, backpressure=backpressure, hold=hold),
         collect_records(monitor.sum_requests, requests, backpressure=backpressure, seed=8), watch],
        until_idle=done, max_cycles=3_000 + hold, sim=sim)

    if restart_timing:
        restart_timing(enabled_at, header_takes)
    rtl = {name: counters_now[i] for i, name in enumerate(COUNTERS) if name != "frames_out"}
    model = {name: fabric.switch.counters[name] for name in COUNTERS if name != "frames_out"}
    assert rtl == model
    assert descriptor_kinds(descriptors) == expected_kinds
    forwards = record_descriptors(descriptors)
    assert len(headers) == len(forwards)
    # each frame that goes on carries its own header record (the model's frame out, parsed)
    forwarded = [record for record, d in zip(headers, forwards, strict=True) if Emission(d.kind) is Emission.FORWARD]
    assert len(forwarded) == len(expected_forwarded)
    for record, expected in zip(forwarded, expected_forwarded, strict=True):
        assert {name: int(getattr(record, name)) for name in expected} == expected
    sums = sum_descriptors(descriptors)
    assert len(requests) == len(sums)
    assert stored_headers == expected_stored
    assert sum(stored) == len(sums)
    for request, d in zip(requests, sums, strict=True):
        assert (int(request.slot), int(request.result_slot)) == (int(d.slot), int(d.rslot))
        assert int(request.mask) == (1 << WORKERS) - 1        # every worker contributed to each message
    if restart:
        return model, last_beats, (restarted_at[0], enabled_at, header_takes)
    return model, last_beats


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow(minutes=0.2))])
def test_the_monitor_decides_every_frame_as_the_model_does(width):
    fabric, frames = scenario()
    model, _ = run_against_model(width, fabric, frames, idle=0.2, backpressure=0.3)
    # the scenario reaches every outcome it was written for
    assert {"aggregated", "duplicates_answered", "duplicates_dropped", "passthrough_gap", "drop_bad_header",
            "drop_spoofed", "credit_requests", "result_requests", "results_resent", "result_requests_refused",
            "drop_bad_icrc", "drop_bad_checksum", "drop_oversize", "forwarded", "passthrough_sequence",
            "passthrough_opcode"} <= {name for name, value in model.items() if value}
    # each frame with a bad IPv4 header checksum (its ICRC right) counted as such, the one bad ICRC as that
    assert {name: model[name] for name in ("drop_bad_checksum", "drop_bad_icrc", "passthrough_sequence",
                                           "passthrough_opcode")} == \
        {"drop_bad_checksum": 3, "drop_bad_icrc": 1, "passthrough_sequence": 1, "passthrough_opcode": 1}


def test_a_receiver_has_each_result_again_at_most_result_resends_times():
    """RESULT_REQUESTs past ``RESULT_RESENDS`` for one message and receiver are refused (counted); the count
    starts again with the next message in the slot, and another receiver's resends are its own."""
    fabric = fabric_of(deadline=1 << 30)
    frames = []
    data, _ = builders(fabric, frames, np.random.default_rng(5))
    for seq in range(SLOTS + 1):                # message SLOTS takes message 0's slot
        for w in range(WORKERS):
            data(w, seq, 0, job=JOB)
        if seq in (0, SLOTS):
            frames += [(0, fabric.request(1, seq))] * (RESULT_RESENDS + 1)
    frames.append((0, fabric.request(2, SLOTS)))
    model, _ = run_against_model(64, fabric, frames, idle=0.2, backpressure=0.3)
    assert (model["results_resent"], model["result_requests_refused"]) == (2 * RESULT_RESENDS + 1, 2)


def test_a_monitor_without_the_bounded_loss_class_decides_as_the_model_does():
    """Built without the class (its states and their logic left out), the monitor decides every frame of the
    reliable class as the model of a switch without it does; a RESULT_REQUEST, which only a bounded-loss job
    has, is dropped as a stray control frame."""
    fabric = fabric_of(reliable_too=True, bounded_loss=False)
    frames = []
    data, ack = builders(fabric, frames, np.random.default_rng(11))
    for w in range(WORKERS):                    # a message, complete: results
        data(w, 0, 0)
    data(1, 0, 0)                               # a retransmission: the sum again
    data(2, 1, 5)                               # a gap: goes on, its PSN shifted
    data(0, 1, 1, header=AggHeader(RELIABLE, 1, 8, magic=0x1234))        # a bad aggregation header
    for w in range(WORKERS):                    # every receiver acknowledges: the message is released
        ack(w, 0)
    frames.append((0, fabric.request(0, 0, ControlType.CREDIT_REQUEST, src=0, job=RELIABLE)))
    frames.append((0, fabric.request(1, 0, job=RELIABLE)))      # a RESULT_REQUEST of a reliable job
    frames.append((0, NOT_ROCE))
    model, _ = run_against_model(64, fabric, frames, idle=0.2, backpressure=0.3, bounded_loss=False)
    assert {"aggregated", "duplicates_answered", "passthrough_gap", "drop_bad_header", "credit_requests",
            "drop_control", "forwarded"} <= {name for name, value in model.items() if value}
    assert model["result_requests"] == 0


def back_to_back_acks():
    """The reliable job's messages acknowledged by ACKs back to back, no idle clock between frames: the fabric,
    ``(port, frame)`` of each frame, and the indexes of the runs of ACKs that must each take one clock."""
    fabric = fabric_of(deadline=1 << 30, reliable_too=True)
    frames = []
    data, ack = builders(fabric, frames, np.random.default_rng(8))

    def pause():        # frames of no connection, a clock each: the results leave before their ACKs
        frames.extend([(0, NOT_ROCE)] * 12)

    def acks(psn_offset, workers):
        first = len(frames)
        for w in workers:
            ack(w, psn_offset)
        return range(first, len(frames))
    one_a_clock = []
    for w in range(WORKERS):
        data(w, 0, 0)
    pause()
    # each ACK advances its connection; the last releases the message, seeing the one before it through
    one_a_clock.append(acks(0, range(WORKERS)))
    pause()
    for w in range(WORKERS):
        data(w, 1, 1)
    pause()
    # worker 1's first ACK is dropped (bad ICRC): the same ACK right behind it, planned as if the first had
    # advanced the connection, is planned again, and advances it; worker 2's then releases the message
    ack(0, 1)
    ack(1, 1)
    port, frame = frames.pop()
    frames.append((port, corrupted(frame)))
    ack(1, 1)
    ack(2, 1)
    pause()
    # the ACK right behind the contribution that completes the packet slot (and sets each connection's
    # newest result sent): planned again once the contribution is written, it advances (not "ahead")
    for w in range(WORKERS):
        data(w, 2, 2)
    ack(0, 2)
    pause()
    one_a_clock.append(acks(2, range(1, WORKERS)))
    # ACKs that deliver nothing new
    one_a_clock.append(acks(2, list(range(WORKERS)) * 2))
    # an ACK right behind one of its connection that advances it, itself behind that one (reordered) but ahead of
    # what the connection had delivered: seen through the first, it delivers nothing new (delivered does not go
    # back); the others' ACKs then release both messages
    for seq in (3, 4):
        for w in range(WORKERS):
            data(w, seq, seq)
    pause()
    pause()
    first = len(frames)
    ack(0, 4)
    ack(0, 3)
    one_a_clock.append(range(first, len(frames)))
    pause()
    one_a_clock.append(acks(4, range(1, WORKERS)))
    return fabric, frames, one_a_clock


@pytest.mark.parametrize("width", [64, 512])
def test_back_to_back_acks(width):
    """ACKs back to back decide as the model does; at 512 bits (an ACK is one beat) each takes one clock,
    whether it advances its connection, releases a message, or delivers nothing new."""
    fabric, frames, one_a_clock = back_to_back_acks()
    model, last_beats = run_against_model(width, fabric, frames, idle=0, backpressure=0)
    assert model["acks_seen"] == 19 and model["acks_ahead"] == 0 and model["drop_bad_icrc"] == 1
    assert model["credits_sent"] == 5 * WORKERS         # the five messages released
    if width == 512:
        for run_ in one_a_clock:
            clocks = [last_beats[i] for i in run_]
            assert clocks == list(range(clocks[0], clocks[0] + len(clocks))), clocks


def test_a_release_stops_at_the_first_message_not_yet_acknowledged():
    """Three messages of the reliable job complete before any is acknowledged: the ACKs of the first release
    it alone (the second's parts are closed, their last PSNs not yet delivered), then those of the second and
    of the third release each in turn. The release reads each message's row (its parts' last PSNs) as the
    job's oldest moves on: a row read a clock late would show the released message's PSNs, all delivered, and
    release the next message with them."""
    fabric = fabric_of(deadline=1 << 30, reliable_too=True)
    frames = []
    data, ack = builders(fabric, frames, np.random.default_rng(12))
    for seq in range(3):
        for w in range(WORKERS):
            data(w, seq, seq)
    frames.extend([(0, NOT_ROCE)] * 12)         # (the results leave before their ACKs)
    for seq in range(3):
        for w in range(WORKERS):
            ack(w, seq)
    model, _ = run_against_model(64, fabric, frames, idle=0.2, backpressure=0.3)
    assert model["aggregated"] == 3 * WORKERS and model["acks_seen"] == 3 * WORKERS
    assert model["credits_sent"] == 3 * WORKERS         # a credit to each worker as each message is released


LONG_MTU = 256      # room for a bounded-loss contribution of 40 elements: 176 payload bytes, 3 beats at 512 bits


def back_to_back_contributions():
    """Bounded-loss contributions back to back, no idle clock between frames: the fabric (its bounded-loss job
    of MTU ``LONG_MTU``), ``(port, frame)`` of each frame, and for the contributions whose clocks are checked,
    their index: their payload's bytes and the clocks they take after their decision (``LOSSY``) before the
    next header is taken in the clock after."""
    fabric = fabric_of(deadline=1 << 30, mtu=LONG_MTU)
    frames, timed = [], {}
    data, _ = builders(fabric, frames, np.random.default_rng(9))

    def contribution(w, seq, n=40, *, then=None):
        if then is not None:
            timed[len(frames)] = (AGG_HEADER_BYTES + 4 * n, then)
        data(w, seq, 0, job=JOB, n=n)
    # (``then``: 0 where LOSSY takes the next header; where the contribution fills its message, COMPLETE, then
    # ADVANCE for each message the window moves by and for the first that it does not)
    for seq in range(2):        # three payload beats each at 512 bits
        contribution(0, seq)                    # opens the message
        contribution(1, seq, 24, then=0)        # another length than the message's: dropped
        contribution(1, seq, then=0)            # joins
        contribution(1, seq, then=0)            # again: a duplicate, dropped
        contribution(2, seq, then=3)            # fills it: complete, the window moves on by one
        contribution(0, seq, then=0)            # again, complete: a duplicate, dropped
        contribution(1, (1 << 32) - 1, then=0)  # a message behind the window: late
    for w in range(WORKERS):    # one payload beat each at 512 bits: its message read after its last beat
        contribution(w, 2, 8, then=0 if 0 < w < WORKERS - 1 else None)
    contribution(0, 3)          # opens message 3
    contribution(0, 4)          # opens message 4
    contribution(1, 4, then=0)
    contribution(2, 4, then=3)  # completes message 4, not the oldest: COMPLETE, ADVANCE (none), and a clock for
    contribution(1, 3, then=0)  # ``due`` to see the completion, with message 3 still open
    contribution(2, 3, then=4)  # completes message 3: the window moves on by two
    contribution(0, 5)
    return fabric, frames, timed


@pytest.mark.parametrize("width", [64, 512])
def test_back_to_back_contributions(width):
    """Bounded-loss contributions back to back decide as the model does; at 512 bits one that neither opens
    nor fills its message is decided in one clock after its last beat, which takes the next header, and the
    next frame's payload follows at once: its last beat as many clocks later as it has beats on the wire. A
    contribution of one payload beat takes a clock more (its message is read after its last beat); one that
    fills its message, a clock to complete it and one for each message the window moves by and one more."""
    fabric, frames, timed = back_to_back_contributions()
    model, last_beats = run_against_model(width, fabric, frames, idle=0, backpressure=0, mtu=LONG_MTU)
    assert {name: model[name] for name in ("aggregated", "drop_bad_length", "duplicates_dropped", "late")} == \
        {"aggregated": 5 * WORKERS + 1, "drop_bad_length": 2, "duplicates_dropped": 4, "late": 2}
    if width == 512:
        beats = [-(-len(frame) // (width // 8)) for _, frame in frames]
        gaps = {i: last_beats[i + 1] - last_beats[i] for i in timed}
        assert gaps == {i: beats[i + 1] + (payload <= width // 8) + then for i, (payload, then) in timed.items()}


def test_frames_of_no_connection_back_to_back_after_a_stall():
    """At 64 bits a frame of no connection may take the next header on its last beat, the header's record
    loading a clock later (``record_pending``); where that next frame is one payload beat long and its beat is
    already waiting, as behind a stall, its last beat must wait for its record. Here the emitter takes no
    descriptor until the monitor's queue is full and the parser's buffers behind it too, then the RoCE frames
    of no connection (each its own PSN and QP, one payload beat) go through back to back: each one's header
    record goes on as the model's frame out."""
    fabric = fabric_of(deadline=1 << 30, reliable_too=True)
    conn = fabric.conns[RELIABLE, 0]
    frames = [(p % PORTS, build_ack(100 + p, 1, eth_src=conn.responder_mac, eth_dst=conn.requester_mac,
                                    src_ip=conn.responder_ip, dst_ip=conn.requester_ip, dest_qp=0x10000 + p))
              for p in range(80)]
    model, last_beats = run_against_model(64, fabric, frames, idle=0, backpressure=0, hold=900)
    assert model["forwarded"] == len(frames)
    # after the stall, frames went through a few clocks apart (buffered), not a frame's 8 wire beats apart
    gaps = [b - a for a, b in zip(last_beats, last_beats[1:], strict=False)]
    assert min(gaps) <= 2, gaps


@pytest.mark.parametrize("width", [64, 512])
def test_every_frame_in_flight_has_its_arrival_stamp(width):
    """Each frame's arrival is stamped as its first beat enters the parser, into ``Deadlines``' FIFO of
    ``DEPTH`` stamps and its two head registers, and the stamp leaves as the monitor takes the header: the
    frames between the two can never outnumber them, or a stamp would be lost and every later frame's
    deadline read from the wrong one. The frames that fill the pipeline most are the smallest (one beat at
    512 bits and more): 200 of them back to back while the emitter takes no descriptor for 3,000 clocks (the
    monitor's queue full, the parser's buffers behind it), then every one of them through."""
    fabric, frames = fabric_of(deadline=1 << 30), [(0, NOT_ROCE)] * 200
    bench, sim = shared_simulator(("monitor", width, MTU, True), lambda: MonitorBench(width, MTU, True))
    monitor, parser = bench.monitor, bench.parser
    counts = {"arrived": 0, "taken": 0, "in_flight": 0, "clock": 0}

    async def watch(ctx):
        while True:
            if counts["clock"] == 3_000:
                counts["arrived_in_the_stall"] = counts["arrived"]
            counts["clock"] += 1
            if ctx.get(parser.i.valid) and ctx.get(parser.i.ready) and ctx.get(parser.i.payload.first):
                counts["arrived"] += 1
            if ctx.get(monitor.frames.valid) and ctx.get(monitor.frames.ready):
                counts["taken"] += 1
            counts["in_flight"] = max(counts["in_flight"], counts["arrived"] - counts["taken"])
            await ctx.tick()

    run(bench, configured_senders(bench, fabric, frames, width),
        [*emitter_part(bench, hold=3_000), watch],
        until_idle=lambda: counts["taken"] == len(frames), max_cycles=10_000, sim=sim)
    # (the stall filled the pipeline: the parser stopped taking frames before the emitter went on)
    assert counts["arrived_in_the_stall"] < counts["arrived"] == len(frames), counts
    assert counts["in_flight"] <= Deadlines.DEPTH + 2, counts


def payload_beats(frame, width):
    """The beats of ``frame``'s payload into the monitor, counted from its bytes (the parser's alignment may
    leave it a beat more)."""
    return -(-len(parse_frame(frame).payload) // (width // 8))


def restarted_between(width, frames, fabric, index, clocks, writes, *, generated=False):
    """Run ``frames`` with ``writes`` (enables) written one a clock, the first ``clocks`` clocks after frame
    ``index``'s first payload beat, the model restarted after that frame. That is where the restart falls if every
    enable reached the monitor while it held the frame (after its header was taken, two clocks before the next
    one): checked before the run is compared with the model, and, where the traffic is ``generated`` (a write that
    came too late for the frame restarts after the next, a case the model's placement does not describe),
    assumed. Returns the model's counters and the clocks from the frame's last payload beat to the first write."""
    def timing(enabled, takes):
        seen = enabled[-len(writes):]           # (the ones before: the configuration's)
        held = takes[index] < seen[0] and all(seen[-1] < take - 2 for take in takes[index + 1:index + 2])
        if generated:
            assume(held)
        assert held, (takes, seen)

    model, last_beats, (written, _, _) = run_against_model(
        width, fabric, frames, idle=0, backpressure=0, mtu=LONG_MTU, restart=(index, clocks, writes),
        restart_timing=timing)
    return model, written - last_beats[index]


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("ahead", [2, 1, 0, -1, -2])
def test_a_job_restarted_while_a_contribution_is_decided(width, ahead):
    """The bounded-loss job's enable is written ``ahead`` clocks before the last payload beat of the
    contribution that fills its first message (after it where negative: in the clocks that decide it): the
    restart waits for that frame's decision and applies before the next header, so that the same three
    contributions fill the message again afresh, as in the model with the jobs restarted between the frames.
    (At 512 bits the message is read while the payload streams: a restart that applied there would leave the
    frame's read of its message stale; at 64 bits one in LOSSY_READ would.)"""
    fabric = fabric_of(deadline=1 << 30, mtu=LONG_MTU)
    frames = []
    data, _ = builders(fabric, frames, np.random.default_rng(10))
    for w in (0, 1, 2, 0, 1, 2):
        data(w, 0, 0, job=JOB, n=40)
    data(0, 1, 0, job=JOB, n=40)
    model, after_last = restarted_between(width, frames, fabric, 2, payload_beats(frames[2][1], width) - 1 - ahead,
                                          register_writes("job", 0, enable=1))
    assert after_last == -ahead
    assert {name: model[name] for name in ("aggregated", "late", "duplicates_dropped", "credits_sent")} == \
        {"aggregated": 7, "late": 0, "duplicates_dropped": 0, "credits_sent": 2 * WORKERS}


@pytest.mark.parametrize("ahead", [6, 3])
def test_connections_restarted_while_a_contribution_is_decided(ahead):
    """The reliable job's connections and then the job are enabled again while the contribution that completes
    its first message streams: they restart after it, so that the same contributions, at their connections'
    first PSNs again, are in sequence and complete the message afresh (a connection that restarted before the
    commit of its frame would take them as retransmissions)."""
    fabric = fabric_of(deadline=1 << 30, mtu=LONG_MTU, reliable_too=True)
    frames = []
    data, _ = builders(fabric, frames, np.random.default_rng(11))
    for w in (0, 1, 2, 0, 1, 2):
        data(w, 0, 0, n=40)
    data(0, 1, 1, n=40)
    writes = [write for w in range(WORKERS)
              for write in register_writes("connection", WORKERS + w, enable=1)]
    model, _ = restarted_between(64, frames, fabric, 2, payload_beats(frames[2][1], 64) - 1 - ahead,
                                 writes + register_writes("job", 1, enable=1))
    assert {name: model[name] for name in ("aggregated", "duplicates_answered", "duplicates_dropped")} == \
        {"aggregated": 7, "duplicates_answered": 0, "duplicates_dropped": 0}


@pytest.mark.parametrize("read, stall", [(-1, 1), (0, 1), (0, 2), (-1, 6), (1, 1), (1, 4)])
def test_a_connection_restarted_beside_a_result_handed_over(read, stall):
    """A bounded-loss connection's newest result PSN (``sent``) moves on by one for each result the emitter
    hands over (``psn_used``), and its enable, written, restarts it at ``start_psn - 1`` and flips its epoch
    (``sent_epochs``) in the clock after the monitor sees the enable. The emitter reads a result's PSN (``sent +
    1``, with the epoch) ``stall`` clocks or more before it hands the result over, and says ``psn_used`` only
    where the epoch is still the one it read (played here as the emitter plays it); here it reads ``read``
    clocks from the restart's clock. A result read in the restart's clock or before took the sequence's
    before it (as the model numbers it, at its message's completion), so ``sent`` is ``start_psn - 1`` after
    it, wherever its hand-over falls; one read after it took the fresh sequence's first PSN, ``start_psn``."""
    fabric = fabric_of(deadline=1 << 30)
    bench, sim = shared_simulator(("monitor", 64, MTU, True), lambda: MonitorBench(64, MTU, True))
    monitor, regs = bench.monitor, bench.registers
    c, start = 1, fabric.conns[JOB, 1].start_psn           # (worker 1 of the bounded-loss job, job 0)
    results_before = 5
    outcome = []

    def epoch_now(ctx):
        return ctx.get(monitor.sent_epochs) >> c & 1

    async def testbench(ctx):
        await write_registers(ctx, regs.csr, switch_config_writes(fabric.config, WORKERS))
        await ctx.tick().repeat(2)
        ctx.set(monitor.psn_used, {"valid": 1, "conn": c})
        await ctx.tick().repeat(results_before)
        ctx.set(monitor.psn_used.valid, 0)
        assert ctx.get(monitor.sent[c]) == start - 1 + results_before
        enable = register_writes("connection", c, enable=1)
        assert len(enable) == 1
        await write_registers(ctx, regs.csr, enable)
        to_restart, psn, epoch, hand_over = None, None, None, None
        for _ in range(16):
            if to_restart is None and ctx.get(monitor.connection_enabled):
                to_restart = 1
            if to_restart is not None and -to_restart == read:         # the emitter's read (STORE_READ)
                psn, epoch, hand_over = ctx.get(monitor.sent[c]) + 1, epoch_now(ctx), stall
            ctx.set(monitor.psn_used, {"valid": hand_over == 0 and epoch == epoch_now(ctx), "conn": c})
            await ctx.tick()
            if to_restart is not None:
                to_restart -= 1
            if hand_over is not None:
                hand_over -= 1
        assert to_restart is not None and to_restart < -1 - stall, "the enable never reached the monitor"
        outcome.append((psn, ctx.get(monitor.sent[c])))

    sim.add_testbench(testbench)
    sim.run()
    fresh = read > 0
    assert outcome == [(start if fresh else start + results_before, start - 1 + fresh)]


class MonitorAndEmitter(Elaboratable):
    """``MonitorBench`` with the switch's emitter behind the monitor, wired as the top wires them (the
    connections' ``sent`` PSNs and epochs to the emitter, ``psn_used`` and ``results_sent`` back)."""

    def __init__(self):
        self.bench = bench = MonitorBench(64, MTU, True)
        self.emitter = Emitter(width=64, workers=WORKERS, jobs=2, message_slots=SLOTS, slots=bench.monitor.slots,
                               packet_beats=bench.monitor.packet_beats, max_frame=MAX_FRAME)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bench, m.submodules.emitter = bench, e = self.bench, self.emitter
        monitor, regs = bench.monitor, bench.registers
        m.d.comb += [e.sent.eq(monitor.sent), e.sent_epochs.eq(monitor.sent_epochs),
                     monitor.psn_used.eq(e.psn_used), monitor.results_sent.eq(e.results_sent),
                     e.jobs.eq(regs.jobs), e.switch.eq(regs.switch), e.connection_write.eq(regs.connection_write),
                     e.payload.ready.eq(1)]
        return m


@pytest.mark.parametrize("offer, stall", [(-2, 0), (-1, 0), (1, 0), (-6, 10)])
def test_a_result_read_before_its_connections_restart_keeps_the_sequence_before(offer, stall):
    """The emitter and the monitor together: three bounded-loss results of a connection (resends, which need
    no sum), its enable written, a fourth result offered ``offer`` clocks from the write (its header held for
    ``stall`` clocks from its offer, by the deparser's backpressure) and a fifth long after. A result whose PSN
    the emitter read before the restart carries the sequence's before it and leaves the fresh sequence to the
    results after; so the fifth result carries ``start_psn`` when the fourth carried the old sequence's next
    PSN, and ``start_psn + 1`` when the fourth carried ``start_psn``."""
    fabric = fabric_of(deadline=1 << 30)
    c, start = 1, fabric.conns[JOB, 1].start_psn
    top, sim = shared_simulator("monitor and emitter", MonitorAndEmitter)
    e, regs = top.emitter, top.bench.registers
    resend = {"kind": Emission.RESULTS, "slot": 0, "rslot": 0, "index0": 1, "beats": 1, "length": 8, "job": 0,
              "k": 0, "workers": WORKERS, "worker": c, "all": 0, "lossy": 1, "resend": 1, "bitmap": 0b111,
              "template": 0}
    enable_at = 40
    offers = [0, 8, 16, enable_at + offer, enable_at + 40]
    psns = []

    async def testbench(ctx):
        await write_registers(ctx, regs.csr, switch_config_writes(fabric.config, WORKERS))
        await ctx.tick().repeat(4)
        ctx.set(e.classes.ready, 1)
        for clock in range(enable_at + 70):
            ctx.set(e.hdr.ready, not offers[3] <= clock < offers[3] + stall)
            if clock in offers:
                ctx.set(e.descriptors.payload, resend)
                ctx.set(e.descriptors.valid, 1)
            if clock == enable_at:
                (address, word), = register_writes("connection", c, enable=1)
                ctx.set(regs.csr.addr, address)
                ctx.set(regs.csr.wdata, word)
                ctx.set(regs.csr.we, 1)
            if ctx.get(e.hdr.valid) and ctx.get(e.hdr.ready):
                psns.append(ctx.get(e.hdr.payload.bth_psn))
            taken = ctx.get(e.descriptors.valid) and ctx.get(e.descriptors.ready)
            await ctx.tick()
            ctx.set(regs.csr.we, 0)
            if taken:
                ctx.set(e.descriptors.valid, 0)

    sim.add_testbench(testbench)
    sim.run()
    old = start - 1 + 4         # the fourth PSN of the sequence before the restart
    assert psns[:3] == [start, start + 1, start + 2]
    assert psns[3:] in ([old, start], [start, start + 1]), psns
    assert (psns[3] == old) == (offer < 0 or stall > 0), psns


@st.composite
def lossy_traffic_and_a_restart(draw, width):
    """Bounded-loss traffic back to back (contributions of each worker to messages in, after and behind the
    window, of the message's length and not, RESULT_REQUESTs, frames of no connection, a bad ICRC), and
    the frame in whose payload the job's enable is written (one of two payload beats or more, so that the
    monitor holds it) with the clocks from its first payload beat: ``(fabric, frames, index, clocks)``."""
    fabric = fabric_of(deadline=1 << 30, mtu=LONG_MTU)
    frames = []
    data, _ = builders(fabric, frames, np.random.default_rng(draw(st.integers(0, 2**16))))
    seqs = st.sampled_from([0, 1, 2, 3, 4, (1 << 32) - 1])
    for _ in range(draw(st.integers(4, 14))):
        kind = draw(st.sampled_from(["contribution"] * 6 + ["request", "plain", "bad icrc"]))
        w = draw(st.integers(0, WORKERS - 1))
        if kind == "request":
            frames.append((((w + 1) % WORKERS) % PORTS, fabric.request(w, draw(seqs))))
        elif kind == "plain":
            frames.append((draw(st.integers(0, PORTS - 1)), NOT_ROCE))
        else:
            data(w, draw(seqs), 0, job=JOB, n=draw(st.sampled_from([40, 40, 24, 8])))
            if kind == "bad icrc":
                port, frame = frames.pop()
                frames.append((port, corrupted(frame)))
    beats = [payload_beats(frame, width) for _, frame in frames]
    index = draw(st.sampled_from([i for i, b in enumerate(beats) if b >= 2] or [None]))
    assume(index is not None)
    return fabric, frames, index, draw(st.integers(0, beats[index] - 2))


@pytest.mark.parametrize("width", [64, 512])
@given(data=st.data())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_job_restarted_in_random_traffic(width, data):
    """Generated bounded-loss traffic with the job's enable written while the monitor holds one of its frames:
    every frame before it is decided on the state before the restart, every frame after on the fresh state,
    as in the model restarted between them (the frames, descriptors and counters of ``run_against_model``)."""
    fabric, frames, index, clocks = data.draw(lossy_traffic_and_a_restart(width))
    restarted_between(width, frames, fabric, index, clocks, register_writes("job", 0, enable=1), generated=True)


@pytest.mark.parametrize("width", [64, 512])
def test_a_contribution_waits_for_its_bank_while_its_results_are_unsent(width):
    """A bank word is written only once the sum that reads it has left. Message 0 completes at its deadline
    with workers 0 and 1, and its results are reported sent (``results_sent``) long after; then worker 2
    (whose word is not in message 0) contributes to message 3 and, right behind it, worker 0 to message 4,
    which message 0's slot holds next: worker 0's contribution waits at its key beat until message 0's results
    have left and then writes its whole payload into its bank, so that message 4's sum reads each worker's
    message-4 words, none left from message 0. The frames that go on (fillers, of no connection, that let
    message 0's deadline pass) have their header records taken as the emitter takes them."""
    deadline, results_delay = 150, 600
    fabric = fabric_of(deadline=deadline)
    frames = []
    data, _ = builders(fabric, frames, np.random.default_rng(12))
    for w in (0, 1):
        data(w, 0, 0, job=JOB)                  # message 0: workers 0 and 1 only, complete at its deadline
    for w in range(WORKERS):
        data(w, 1, 0, job=JOB)                  # complete
    filler_beats = -(-len(NOT_ROCE) // (width // 8))
    frames += [(0, NOT_ROCE)] * (2 * deadline // filler_beats)      # past message 0's deadline: the window
    for w in range(WORKERS):                                        # (of SLOTS / 2 messages) moves on to 2
        data(w, 2, 0, job=JOB)                  # complete: the window moves on to 3
    data(2, 3, 0, job=JOB)
    late = len(frames)
    for w in (0, 1, 2):
        data(w, 4, 0, job=JOB)                  # message 4, in message 0's slot: complete, summed

    bench, sim = shared_simulator(("monitor", width, MTU, True), lambda: MonitorBench(width, MTU, True))
    monitor = bench.monitor
    clock = [0]
    beats = collections.defaultdict(list)       # frame index: the payload words the monitor took
    banks = {}                                  # (worker, packet slot, beat): the word last written there
    sent_at, writes_at, summed = {}, collections.defaultdict(list), []

    async def watch(ctx):
        frame = 0
        ctx.set(monitor.sum_requests.ready, 1)
        while True:
            payload, write = monitor.payload, monitor.slot_write
            if ctx.get(payload.valid) and ctx.get(payload.ready):
                beats[frame].append(ctx.get(payload.payload.data))
                frame += ctx.get(payload.payload.last)
            if ctx.get(write.valid):
                key = (ctx.get(write.worker), ctx.get(write.slot), ctx.get(write.beat))
                banks[key] = ctx.get(write.data)
                writes_at[key[:2]].append(clock[0])
            if ctx.get(monitor.sum_requests.valid):
                request = ctx.get(monitor.sum_requests.payload)
                summed.append((int(request.slot), int(request.mask), dict(banks), clock[0]))
            clock[0] += 1
            await ctx.tick()

    run(bench, configured_senders(bench, fabric, frames, width),
        [*emitter_part(bench, results_delay=results_delay, sent_at=sent_at), watch],
        until_idle=lambda: len(summed) == 4, max_cycles=20_000, sim=sim)
    slot0 = 0                                   # (packet slot 0 of message slot 0: messages 0 and 4)
    assert [(slot, mask) for slot, mask, _, _ in summed] == [(1 * PACKETS, 0b111), (slot0, 0b011),
                                                            (2 * PACKETS, 0b111), (slot0, 0b111)]
    (_, _, banks_then, _), message0_summed, message0_sent = summed[3], summed[1][3], sent_at[0][0]
    # worker 0's words of message 4 went in after message 0's results left, not before
    assert message0_summed < message0_sent < min(t for t in writes_at[0, slot0] if t > message0_summed)
    for w in range(WORKERS):
        words = beats[late + w]
        assert [banks_then[w, slot0, b] for b in range(len(words))] == words, f"worker {w}"
