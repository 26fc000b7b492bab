"""Launch tb/switch_tb.py: all-reduce traffic recorded on the golden model (emulated RC workers, faults on
both sides of the switch), replayed into the generated Verilog of NetReduceSwitch, and compared frame for
frame, byte for byte and counter for counter.

Seven builds keep the suite short (``netreduce.tb.scenarios.SWITCH_BUILDS``). The 2-port build also runs
the one-port scenarios (everything on port 0), and the closed loop on two ports, where both ports carry
traffic at once.
"""

import collections
import functools
import json
import subprocess
import sys

import numpy as np
import pytest

from netreduce.egress import LAYER_GROUPS, MAGNITUDE_BUCKETS, drop_level, lossy_class
from netreduce.host import attacks
from netreduce.host.attacks import NEAR_WRAP, attacker
from netreduce.host.faults import FaultSpec
from netreduce.host.network import build_allreduce, record_frames
from netreduce.host.packets import build_roce_frame
from netreduce.host.protocol import AggHeader
from netreduce.registers import address, counter_address, register_writes
from netreduce.sim.fp import tree_sum
from netreduce.sim.roce_model import parse_frame
from netreduce.tb import scenarios
from netreduce.tb.scenarios import SWITCH_BUILDS, record, record_in_band, switch_of
from netreduce.wire import MSG_SEQ_MODULUS, RC_WRITE_OPCODES

from references import WRITE_ONLY_IMM, Fabric, elements

pytestmark = pytest.mark.slow(minutes=3)

FAULTS = FaultSpec(loss=0.03, duplicate=0.03, reorder=0.03, corrupt=0.03)


def replay(tmp_path, scenario, build, *, idle=0.0, backpressure=0.0, seed=0, mac=False):
    scenarios.replay(tmp_path, scenario, build, idle=idle, backpressure=backpressure, seed=seed, mac=mac)


def greedy_and_spoofed(network):
    """Worker 0 of job 0 ignores its credits; a stranger and a wrong QPN write into the job."""
    greedy = next(w for w in network.workers if w.job.job == 0 and w.index == 0)
    greedy.allowed = 1 << 30
    header = AggHeader(job=0, msg_seq=0, elements=60)
    for i, (src_ip, qpn) in enumerate((("10.0.9.9", greedy.requester.remote.qpn),
                                       (greedy.host.ip, 0x999))):
        frame = build_roce_frame(0x0A, header.pack() + np.full(60, 1e30, np.float32).tobytes(),
                                 reth=(0, 0, 256), eth_dst=network.hosts[1].address.mac, src_ip=src_ip,
                                 dst_ip=network.hosts[1].address.ip, dest_qp=qpn, psn=i)
        network.at(2000 + i, network.hosts[0].send, frame, 2000 + i)


def test_faults_two_jobs_psn_wrap_64(tmp_path):
    scenario = record(workers=3, jobs=2, nbytes=6000, mtu=256, faults_up=FAULTS, faults_down=FAULTS,
                      start_psn=(1 << 24) - 20, credit_timeout_ns=20_000, seed=1)
    assert scenario["status"] == "done"
    counters = scenario["counters"]
    for name in ("passthrough_gap", "duplicates_answered", "drop_bad_icrc", "credits_sent"):
        assert counters[name] > 0, name          # the scenario reaches these paths
    replay(tmp_path, scenario, "fp32x64", idle=0.1, backpressure=0.2, seed=1)


def test_eight_workers_64(tmp_path):
    scenario = record(workers=8, nbytes=12000, mtu=1024, seed=2)
    assert scenario["status"] == "done"
    replay(tmp_path, scenario, "fp32x64", backpressure=0.3, seed=2)


@pytest.mark.build_leader       # of the fp32x64 build
def test_mac_models_at_line_rate_64(tmp_path):
    """cocotbext-eth MACs on the ports at 10 Gb/s (64 bits at 156.25 MHz): 8 workers' frames paced as
    a MAC delivers them; the switch never holds one back and sends every frame out without a pause."""
    scenario = record(workers=8, nbytes=24000, mtu=1024, seed=9)
    assert scenario["status"] == "done"
    replay(tmp_path, scenario, "fp32x64", seed=9, mac=True)


def wrong_aggregation_headers(network):
    """Worker 1 of job 1 (its own address, QP and expected PSN) sends, between its messages, first packets
    whose aggregation header names the wrong message or the wrong job (``drop_bad_header``)."""
    worker = next(w for w in network.workers if w.job.job == 1 and w.index == 1)
    host = next(h for h in network.hosts if h.address == worker.host)
    remote = worker.requester.remote

    def send(wrong):
        state = network.engine.model.jobs[1].connections[1]       # the switch's view of the connection
        if state.slot is not None:                                  # in a message: would pass through
            return
        header = AggHeader(job=0 if wrong == "job" else 1,
                           msg_seq=(state.next_seq + (wrong == "message")) % MSG_SEQ_MODULUS, elements=60)
        host.send(build_roce_frame(0x0A, header.pack() + np.full(60, 1e30, np.float32).tobytes(),
                                   reth=(0, 0, 256), eth_src=worker.host.mac, eth_dst=remote.mac,
                                   src_ip=worker.host.ip, dst_ip=remote.ip,
                                   dest_qp=remote.qpn, psn=state.expected), network.now)

    for time in range(0, 400_000, 5_000):
        network.at(time, send, "message" if time % 10_000 else "job")


@pytest.mark.parametrize("build", ["fp32x64", "fp32x512"])
def test_packets_without_elements(tmp_path, build):
    """Packets that carry no element: message 0 of every worker ends in a RDMA WRITE LAST of no payload
    (its slot sums zero bytes), message 1 is a WRITE ONLY holding the aggregation header alone; then a
    retransmitted empty LAST is answered from the slot. Each gets a result of its own length, as the
    model says (nothing in the protocol forbids them, and the switch must not stall on them)."""
    workers = 3 if build == "fp32x64" else 4
    network, _, _ = build_allreduce(workers=workers, nbytes=64, mtu=256, message_packets=4, message_slots=4)
    config = network.switch_config
    rng = np.random.default_rng(10)
    ops = RC_WRITE_OPCODES

    def frame(conn, opcode, psn, payload, reth=None):
        return build_roce_frame(ops[opcode], payload, reth=reth, eth_src=conn.requester_mac,
                                eth_dst=conn.responder_mac, src_ip=conn.requester_ip, dst_ip=conn.responder_ip,
                                dest_qp=conn.responder_qpn, psn=psn % (1 << 24))
    firsts, lasts, onlies = [], [], []
    for conn in config.connections:
        data = rng.standard_normal(16).astype(np.float32).tobytes()
        firsts.append(frame(conn, "FIRST", conn.start_psn, AggHeader(job=0, msg_seq=0, elements=16).pack() + data,
                            reth=(0, 0x1000, 80)))
        lasts.append(frame(conn, "LAST", conn.start_psn + 1, b""))
        onlies.append(frame(conn, "ONLY", conn.start_psn + 2, AggHeader(job=0, msg_seq=1, elements=0).pack(),
                            reth=(0, 0x1000, 16)))
    scenario = record_frames(config, firsts + lasts + onlies + lasts[:1])
    counters = scenario["counters"]
    assert counters["aggregated"] == 3 * workers and counters["drop_bad_length"] == 0
    assert counters["results_sent"] == 3 * workers and counters["duplicates_answered"] == 1
    empty = [out for produced in scenario["outputs"][len(firsts):2 * workers] for _, out in produced]
    assert len(empty) == workers and all(len(out) == 60 for out in empty)     # headers and padding only
    replay(tmp_path, scenario, build, backpressure=0.2, seed=10)


def test_credit_violation_spoofing_and_credit_requests_64(tmp_path):
    def setup(network):
        greedy_and_spoofed(network)
        wrong_aggregation_headers(network)
    scenario = record(workers=2, jobs=2, nbytes=40000, mtu=1024, credit_timeout_ns=5_000, seed=3, setup=setup)
    counters = scenario["counters"]
    assert counters["drop_no_credit"] > 0 and counters["credit_requests"] > 0
    assert counters["drop_bad_header"] > 0
    replay(tmp_path, scenario, "fp32x64", idle=0.05, seed=3)


def every_attack(network):
    """All of host.attacks at once: spoofed contributions from attacker 0 (job 0, worker 0) and attacker 1
    (job 1, worker 1), forged ACKs after every result and ACKs ahead of sent, forged retransmissions to read
    a sum, forged CREDITs and control packets to hosts, short credit requests, a worker of job 1 ignoring
    its credits."""
    for setup in (attacks.spoofed_contributions,
                  functools.partial(attacks.spoofed_contributions, attacker=1, job=1, worker=1),
                  attacks.forged_acks, attacks.acks_ahead, attacks.forged_retransmissions,
                  attacks.forged_credits, attacks.short_credit_requests,
                  functools.partial(attacks.greedy_worker, job=1, worker=0)):
        setup(network)


def check_attacked(scenario):
    assert scenario["status"] == "done"
    counters = scenario["counters"]
    for name in ("drop_spoofed", "drop_control", "acks_ahead", "drop_no_credit", "aggregated"):
        assert counters[name] > 0, name          # the scenario reaches these paths


def test_attacks_across_2_32_two_ports_64(tmp_path):
    """The trust boundary (docs: "Trust model") at 64 bits: every attack of host.attacks, attackers on
    both ports (one beside workers 0 and 2, one beside 1 and 3), faults on both sides, message numbers
    crossing 2^32; frame for frame and counter for counter against the model."""
    scenario = record(workers=4, jobs=2, ports=2, nbytes=16000, mtu=512, faults_up=FAULTS, faults_down=FAULTS,
                      start_msg=NEAR_WRAP, extra_hosts=[attacker(0), attacker(1, index=1)],
                      credit_timeout_ns=20_000, timeout_ns=100_000, seed=11, setup=every_attack)
    check_attacked(scenario)
    replay(tmp_path, scenario, "fp32x64", idle=0.1, backpressure=0.2, seed=11)


@pytest.mark.build_leader       # of the fp32x512 build
def test_attacks_same_port_512(tmp_path):
    """The same at 512 bits on one port: the attackers share the workers' port and differ from a worker
    only by their MAC (and, for a forged ACK, from the responder only by it)."""
    scenario = record(workers=3, jobs=2, nbytes=30000, mtu=1024, start_msg=NEAR_WRAP, width=512,
                      extra_hosts=[attacker(0), attacker(0, index=1)], credit_timeout_ns=20_000, seed=12,
                      setup=every_attack)
    check_attacked(scenario)
    replay(tmp_path, scenario, "fp32x512", idle=0.1, backpressure=0.2, seed=12)


def test_two_ports_faults_64(tmp_path):
    """Hosts on two ports: contributions, results, ACKs and credits cross between them."""
    scenario = record(workers=4, jobs=2, ports=2, nbytes=9000, mtu=1024, faults_up=FAULTS, faults_down=FAULTS,
                      seed=8)
    assert scenario["status"] == "done"
    ports_in = {port for port, _ in scenario["inputs"]}
    ports_out = {port for produced in scenario["outputs"] for port, _ in produced}
    assert ports_in == ports_out == {0, 1}
    replay(tmp_path, scenario, "fp32x64", idle=0.1, backpressure=0.2, seed=8)


@pytest.mark.build_leader       # of the fp32x512p64, fp32x256p64 and fp32x1024p512 builds
@pytest.mark.parametrize("build, seed", [("fp32x512p64", 9), ("fp32x256p64", 11), ("fp32x1024p512", 10)])
def test_ports_narrower_than_the_core_faults(tmp_path, build, seed):
    """Hosts on every port of a core wider than its ports (``hw.gearbox``: each port's frames widened and held
    whole, taken oldest first): four 64-bit ports into the 512-bit core, two into the 256-bit core, two 512-bit
    ports into the 1,024-bit core. The model's frames and counters, frame for frame, through faults; and from
    a host on port 0 oversize frames, UDP and RoCE with a wrong ICRC, longer than ``max_frame`` and longer than
    the port's buffer (cut short there), each counted ``drop_oversize`` as the model does whatever the
    checksums, and a small RoCE packet whose Ethernet padding takes its frame past the port's buffer (cut
    short, and forwarded as the model forwards it)."""
    ports, port_width = SWITCH_BUILDS[build]["ports"], SWITCH_BUILDS[build]["port_width"]
    switch = switch_of(build)
    switch._MustUse__silence = True             # described, not built
    port_buffer = switch.whole_frames_beats * switch.width // 8
    stranger = dict(src_ip="10.9.9.9", dst_ip="10.9.9.8", eth_dst=0x02_00_00_00_0F_0F, dest_qp=0x123)
    oversize = [build_roce_frame(0x04, bytes(length), dport=9, **stranger)
                for length in (switch.max_frame + 100, port_buffer + 100)]
    oversize += [build_roce_frame(0x04, bytes(length), psn=7, icrc=0xDEADBEEF, **stranger)
                 for length in (switch.max_frame + 100, port_buffer + 100)]

    packet = build_roce_frame(0x04, bytes(100), psn=8, **stranger)
    padded = packet + bytes(port_buffer + 100 - len(packet))

    def setup(network):
        for frame in [*oversize, padded]:
            network.engine.inject(0, frame, 0)
    scenario = record(workers=4, jobs=2, ports=ports, nbytes=9000, mtu=1024, faults_up=FAULTS, faults_down=FAULTS,
                      seed=seed, width=port_width, setup=setup)
    assert scenario["status"] == "done"
    assert scenario["counters"]["drop_oversize"] == len(oversize)
    assert [[out for _, out in produced] for (_, frame), produced in zip(scenario["inputs"], scenario["outputs"],
                                                                          strict=True) if frame == padded] == [[packet]]
    assert {port for port, _ in scenario["inputs"]} == set(range(ports))
    replay(tmp_path, scenario, build, idle=0.1, backpressure=0.2, seed=seed)


def test_faults_512(tmp_path):
    scenario = record(workers=3, jobs=2, nbytes=8000, mtu=1024, faults_up=FAULTS, faults_down=FAULTS,
                      start_psn=(1 << 24) - 10, seed=4, width=512)
    assert scenario["status"] == "done"
    replay(tmp_path, scenario, "fp32x512", idle=0.1, backpressure=0.2, seed=4)


def test_mtu_4096_512(tmp_path):
    scenario = record(workers=4, nbytes=40000, mtu=4096, seed=5, width=512)
    assert scenario["status"] == "done"
    replay(tmp_path, scenario, "fp32x512", backpressure=0.3, seed=5)


@pytest.mark.build_leader       # of the bf16x64 and fp16x64 builds
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_16_bit_formats_64(tmp_path, dtype):
    faults = FaultSpec(loss=0.02, duplicate=0.02, reorder=0.02)
    scenario = record(workers=3, nbytes=3002, mtu=256, dtype=dtype, faults_up=faults, faults_down=faults,
                      seed=6)
    assert scenario["status"] == "done"
    replay(tmp_path, scenario, f"{dtype}x64", idle=0.1, backpressure=0.1, seed=6)


def ipv6_frames():
    """IPv6 frames to a host the network does not have: RoCE with its ICRC right, wrong, and followed by bytes
    past the IP packet; UDP that is not RoCE; each with a traffic class."""
    v6 = dict(ipv6=True, src_ip="fd00::7", dst_ip="fd00::8", eth_dst=0x02_00_00_00_0F_0F, dest_qp=0x123)
    return [build_roce_frame(0x04, bytes(range(32)), psn=1, dscp=26, **v6),
            build_roce_frame(0x04, bytes(range(32)), psn=2, dscp=46, icrc=0xDEADBEEF, **v6),
            build_roce_frame(0x0A, bytes(24), reth=(0x1000, 7, 24), psn=3, **v6) + bytes(range(1, 11)),
            build_roce_frame(0x04, bytes(16), dport=9, dscp=10, **v6)]


def test_ipv6_frames_go_on_byte_for_byte_without_ipv6_64(tmp_path):
    """A build without IPv6 RoCE (fp16x64) forwards IPv6 frames byte for byte, a wrong ICRC and bytes past
    the IP packet included, between the frames of an all-reduce; the switch with IPv6 drops the one with the
    wrong ICRC (the golden model, both ways)."""
    frames = ipv6_frames()

    def setup(network):
        for frame in frames:
            network.engine.inject(0, frame, 0)
    scenario = record(workers=3, nbytes=3000, mtu=256, dtype="fp16", seed=8, ipv6=False, setup=setup)
    assert scenario["status"] == "done"
    sent = {frame: produced for (_, frame), produced in zip(scenario["inputs"], scenario["outputs"], strict=True)
            if frame in frames}
    assert [[out for _, out in sent[frame]] for frame in frames] == [[frame] for frame in frames]
    assert scenario["counters"]["drop_bad_icrc"] == 0
    with_ipv6 = record(workers=3, nbytes=3000, mtu=256, dtype="fp16", seed=8, setup=setup)
    assert with_ipv6["counters"]["drop_bad_icrc"] == 1
    replay(tmp_path, scenario, "fp16x64", idle=0.1, backpressure=0.1, seed=8)


def test_simulate_closed_loop_on_the_rtl(tmp_path):
    """`netreduce simulate --engine rtl`: the emulated workers around the running Verilog (the fp32x64
    build: 8 workers, 2 jobs, 2 ports, MTU room 4096), with faults on both sides; the hosts on both ports
    send at once, so the port arbiter takes frames from both. ``--pcap``: every frame the RTL sent is
    captured with a valid ICRC, and the capture agrees with the summary (``check_link_capture``)."""
    from references import check_link_capture

    dump, pcap = tmp_path / "out.npz", tmp_path / "out.pcapng"
    result = subprocess.run([sys.executable, "-m", "netreduce", "simulate", "--engine", "rtl", "--workers", "8",
                             "--jobs", "2", "--ports", "2", "--mtu", "4096", "--bytes", "6000", "--loss", "0.03",
                             "--dup", "0.03", "--reorder", "0.03", "--seed", "7", "--dump", str(dump),
                             "--pcap", str(pcap)],
                            capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["engine"] == "rtl" and summary["match"] is True and summary["status"] == "done"
    assert summary["counters"]["aggregated"] > 0
    assert sum(v for k, v in summary["drops"].items() if k.startswith(("up_", "down_"))) > 0   # faults hit
    counts = check_link_capture(pcap, summary)
    assert counts["sent_down"] == summary["counters"]["frames_out"]
    arrays = np.load(dump)
    for job in range(2):
        inputs = np.stack([arrays[f"job{job}_worker{w}_input"].view(np.uint32) for w in range(8)])
        expected = tree_sum("fp32", inputs).astype(np.uint32)
        for w in range(8):
            np.testing.assert_array_equal(arrays[f"job{job}_worker{w}_result"].view(np.uint32), expected)


def test_simulate_bounded_loss_on_the_rtl(tmp_path):
    """`netreduce simulate --engine rtl --class lossy` (the fp32x64 build): bounded-loss workers around the
    running Verilog, with loss on both sides: deadlines fire, lost results are asked for again, and every
    element of every result is the tree sum of exactly the contributors its bitmap names."""
    from test_cli_simulate import check_partial_sums

    dump = tmp_path / "out.npz"
    result = subprocess.run([sys.executable, "-m", "netreduce", "simulate", "--engine", "rtl", "--class", "lossy",
                             "--workers", "8", "--jobs", "2", "--ports", "2", "--mtu", "4096", "--bytes", "40000",
                             "--loss", "0.05", "--seed", "3", "--dump", str(dump)],
                            capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["engine"] == "rtl" and summary["class"] == "lossy"
    assert summary["match"] is True and summary["status"] == "done"
    assert summary["deadline_completions"] == summary["counters"]["deadline_completions"] > 0
    assert summary["counters"]["results_resent"] > 0
    histogram = summary["contributors_histogram"]
    assert set(histogram) == {*map(str, range(8)), "8_or_more"} and histogram["8_or_more"] > 0
    contributors = check_partial_sums(np.load(dump), 2, 8, 10000)
    assert ((contributors != 0) & (contributors != 0xFF)).any()         # partial sums were delivered


@pytest.mark.parametrize("build", ["fp32x64", "fp32x512"])
def test_configured_in_band(tmp_path, build):
    """The switch leaves reset knowing only its management address (docs: "In-band control plane"): its
    manager loads the configuration through management packets, one reply at a time; the all-reduce runs
    with an attacker sending management requests of its own and, at 64 bits, from the other port, in the
    manager's name; at 512 bits, from the manager's port, malformed ones in the manager's name; the manager
    then reads counters and a configuration word. Every frame, the replies included, and every counter equal
    to the model's. A forwarding entry naming a port the build lacks is not used."""
    switch = switch_of(build)
    switch._MustUse__silence = True             # described, not built
    ports, width = switch.ports, switch.width
    reads = [counter_address(name) for name in ("frames_in", "aggregated", "management_refused", "management_bad")]
    reads.append(address("job", 0, "id"))
    # forwarding entry 0 (host 0's MAC) names a port the build lacks: not used, so host 0's frames take the
    # default port (a router that took the number would send them out of port 3 mod 2)
    writes = register_writes("forwarding", 0, port=3)
    scenario = record_in_band(build, reads=reads, writes=writes, workers=3, jobs=2, ports=ports, width=width,
                              nbytes=6000, mtu=512,
                              extra_hosts=[attacker(0)], seed=21,
                              setup=functools.partial(attacks.forged_management, address=switch.management,
                                                      forge=ports > 1, malformed=True))
    assert scenario["status"] == "done"
    counters = scenario["counters"]
    assert counters["management_refused"] > 0 and counters["aggregated"] > 0
    assert (counters["management_bad"] > 0) == (ports == 1)
    replies = [frame for port, frame in sum(scenario["outputs"], []) if port == switch.management.manager_ingress
               and frame[:6] == switch.management.manager_mac.to_bytes(6, "big")]
    assert len(replies) == counters["management_requests"] > len(reads)
    replay(tmp_path, scenario, build, idle=0.05, backpressure=0.1, seed=21)


def lossy(width, traffic_class="lossy", **kwargs):
    """A bounded-loss all-reduce recorded on the model: ``kwargs`` for :func:`record`."""
    scenario = record(traffic_class=traffic_class, width=width, **kwargs)
    assert scenario["status"] == "done"
    return scenario


def replay_timed(tmp_path, scenario, build, **params):
    """The bounded-loss class: the model run again at the switch's arrivals (``timed_against_model``), the run
    going on for two deadlines past the last frame in."""
    deadline = max(job.deadline_clocks for job in scenario["config"].jobs if job.lossy)
    scenarios.replay(tmp_path, scenario, build, testcase="timed_against_model", settle=2 * deadline + 2000,
                     **params)


def test_bounded_loss_lost_contributions_512(tmp_path):
    """Contributions lost before the switch: their messages complete at their deadlines with the others'
    values, results carry the bitmap; under backpressure the egress stage drops bounded-loss results whole,
    and counts them. Every frame out is the model's (at the RTL's arrivals), every counter equal."""
    scenario = lossy(512, workers=4, nbytes=6000, mtu=1024, faults_up=FaultSpec(loss=0.1), seed=3)
    replay_timed(tmp_path, scenario, "fp32x512", backpressure=0.5, seed=3, deadlines=True, drops=True)


@pytest.mark.parametrize("build", ["fp32x64", "fp32x512"])
def test_bounded_loss_drops_by_class_under_backpressure(tmp_path, build):
    """Two jobs share the switch and its port: a reliable one (RC, go-back-N) and a bounded-loss one whose
    messages, of a layered model (16 layers), carry the classes of their layer group and magnitude; the
    port drains at a third of the rate the switch sends (backpressure), and the drop thresholds, written
    through the registers, are low for the two lowest drop levels (front layers, small magnitudes: level l at
    l + 1 results' worth of the port's buffer) and never
    reached for the others: the egress stage drops results whole, by threshold those of the two levels only
    (any droppable frame may still be dropped when a largest frame would not fit, ``drops_full``), never
    anything but bounded-loss results (no frame of the reliable job), and every frame out is the model's;
    the results of the highest queue
    wait less than those of the lowest, in clocks from their message's first contribution in."""
    layers = [(f"layer{i}", 96) for i in range(16)]
    width = scenarios.SWITCH_BUILDS[build]["width"]
    scenario = lossy(width, ["reliable", "lossy"], workers=4, jobs=2, nbytes=16 * 96 * 4, mtu=256, layers=layers,
                     seed=9)
    out = tmp_path / "drops.json"
    result_beats = -(-(256 + 62) // (width // 8))       # a result: the MTU's payload and its headers
    replay_timed(tmp_path, scenario, build, backpressure=0.67, seed=9, drops=True, drops_out=str(out),
                 threshold_step=result_beats, drop_levels=2)
    figures = json.loads(out.read_text())
    by_class = {int(c): counts for c, counts in figures["classes"].items()}
    by_level = collections.defaultdict(collections.Counter)
    for g in range(LAYER_GROUPS):
        for b in range(MAGNITUDE_BUCKETS):
            by_level[drop_level(g, b)].update(by_class.get(lossy_class(g, b), {}))
    assert all(by_level[level]["drops_threshold"] > 0 for level in (0, 1)), dict(by_level)
    high = [counts for level, counts in by_level.items() if level >= 2]
    assert sum(c["offered"] for c in high) > 0 and all(c["drops_threshold"] == 0 for c in high), dict(by_level)
    # strict priority: results of the highest queue wait less, from their message's first contribution in
    waits = collections.defaultdict(list)
    for queue, clocks in figures["waits"]:
        waits[queue].append(clocks)
    mean = {queue: sum(clocks) / len(clocks) for queue, clocks in waits.items()}
    assert len(mean) >= 2 and mean[min(mean)] < mean[max(mean)], mean


def test_bounded_loss_without_loss_fires_no_deadline_64(tmp_path):
    """Duplicated and reordered contributions, none lost, two jobs on two ports: every message completes
    full before its deadline, in the RTL as in the model; duplicates are dropped."""
    faults = FaultSpec(duplicate=0.05, reorder=0.05)
    scenario = lossy(64, workers=4, jobs=2, ports=2, nbytes=6000, mtu=1024, faults_up=faults, seed=2)
    assert scenario["counters"]["duplicates_dropped"] > 0
    replay_timed(tmp_path, scenario, "fp32x64", idle=0.1, backpressure=0.1, seed=2, no_deadlines=True)


def test_bounded_loss_faults_both_sides_two_ports_64(tmp_path):
    """Loss, duplication and reordering on both sides, two jobs, hosts on two ports: late and duplicate
    contributions, results lost on the way down and asked for again (RESULT_REQUEST), credits; with
    random idle cycles and backpressure."""
    faults = FaultSpec(loss=0.05, duplicate=0.05, reorder=0.05)
    scenario = lossy(64, workers=4, jobs=2, ports=2, nbytes=5000, mtu=512, faults_up=faults, faults_down=faults,
                     seed=13)
    counters = scenario["counters"]
    assert counters["results_resent"] and counters["result_requests_stale"] and counters["duplicates_dropped"]
    replay_timed(tmp_path, scenario, "fp32x64", idle=0.1, backpressure=0.1, seed=13, deadlines=True)


FILLER = bytes.fromhex("029900000001" "029900000002" "88b5") + bytes(46)     # forwarded, to the default port


def deadline_sweep(ports, plan, deadline):
    """Directed traffic around a deadline: for message s, with ``(gap, n) = plan[s]``, worker 0's contribution
    of ``n`` elements opens it, ``gap`` 60-byte frames of no connection follow, then worker 1's contribution,
    which comes before the deadline (the message completes full) or at or after it (the deadline completes it
    with worker 0 alone, and the contribution is late), depending on where it arrives."""
    fabric = Fabric(workers=2, ports=ports, deadline=deadline)
    rng = np.random.default_rng(1)
    inputs = []
    for seq, (gap, n) in enumerate(plan):
        inputs.append((0, fabric.contribution(0, seq, elements(rng, n))))
        inputs += [(0, FILLER)] * gap
        inputs.append((1 % ports, fabric.contribution(1, seq, elements(rng, n))))
    return {"config": fabric.config, "inputs": inputs, "after": [0] * len(inputs), "outputs": [[]] * len(inputs)}


def test_bounded_loss_deadlines_of_two_jobs_in_one_wait_64(tmp_path):
    """Two bounded-loss jobs: job 0's message opens first with the later deadline, job 1's a frame later with
    the earlier one, and both come while a 2,000-byte frame of no connection goes through the monitor, so that
    both are due when it is done: the RTL completes job 1's first, as the model does (the earlier deadline
    first, whatever the job), and every frame out of every port is the model's, in its order."""
    fabric = Fabric(workers=2, ports=2, deadline=200, lossy_too=100)
    rng = np.random.default_rng(6)
    long_filler = FILLER[:14] + bytes(2000 - 14)
    inputs = [(0, fabric.contribution(0, 0, elements(rng, 8), job=fabric.job.job)),
              (0, fabric.contribution(0, 0, elements(rng, 8), job=fabric.job.job + 1)),
              (0, long_filler), (0, FILLER)]
    scenario = {"config": fabric.config, "inputs": inputs, "after": [0] * len(inputs),
                "outputs": [[]] * len(inputs)}
    # the model at arrivals like the RTL's: both due before the last frame, job 1's first
    model = fabric.switch
    out = [pair for at, (port, frame) in zip((0, 20, 40, 300), inputs, strict=True)
           for pair in model.receive(port, frame, now=at)]
    results = [parse_frame(frame) for _, frame in out]
    assert [AggHeader.unpack(result.payload).job for result in results if result.header["bth_opcode"]
            == WRITE_ONLY_IMM] == [fabric.job.job + 1] * 2 + [fabric.job.job] * 2
    scenarios.replay(tmp_path, scenario, "fp32x64", testcase="timed_against_model", settle=1000, deadlines=True)


@pytest.mark.parametrize("build", ["fp32x512", "fp32x64"])
def test_bounded_loss_deadline_against_arrivals(tmp_path, build):
    """Worker 1's contributions arrive from well before to well after their message's deadline (the gap and
    the contributions' lengths swept, random idle cycles between): the RTL fires each deadline before exactly
    the frames that arrived at or after it, as the model does at the RTL's arrival clocks; the sweep covers
    arrivals one clock before the deadline and at it (worker 0's contribution opens each message at its own
    arrival)."""
    deadline, width = 48, scenarios.SWITCH_BUILDS[build]["width"]
    filler_clocks = -(-len(FILLER) // (width // 8)) + 1
    # (n up to 12: 16 + 4n bytes within the job's MTU of 64)
    plan = [(gap, n) for gap in range(deadline // filler_clocks + 2) for n in range(8, 13) for _ in range(4)]
    scenario = deadline_sweep(scenarios.SWITCH_BUILDS[build].get("ports", 1), plan, deadline)
    out = tmp_path / "arrivals.json"
    scenarios.replay(tmp_path, scenario, build, testcase="timed_against_model", settle=2000, deadlines=True,
                     late=True, idle=0.3, seed=5, arrivals_out=str(out))
    arrivals, offsets, at = json.loads(out.read_text()), set(), 0
    for gap, _ in plan:
        offsets.add(arrivals[at + gap + 1] - arrivals[at])
        at += gap + 2
    assert {deadline - 1, deadline} <= offsets, str(sorted(offsets))


def test_gates_count_the_frames_sent_at_deadlines():
    """A replay whose results the egress stage may drop (``drops``) gates each frame in on the recording's frames out
    before it that cannot be dropped (``gates_past_droppable``): counted over every frame the model sent, in its
    order, the bounded-loss results it sent at deadlines included (``expired``: none in ``outputs``), so that a
    gate past the frames in ``outputs`` still names a count (it raised ``IndexError``)."""
    from netreduce.host.protocol import ControlMessage, ControlType, build_control_frame
    from netreduce.tb.switch_tb import frames_sent, gates_past_droppable
    ips = dict(src_ip="10.0.0.1", dst_ip="10.0.0.2")
    result = (0, build_roce_frame(0x2B, bytes(64), immdt=1, **ips))      # a bounded-loss result: droppable
    credit = (0, build_control_frame(ControlMessage(ControlType.CREDIT, 0, 0, 1), src_mac="02:00:00:00:00:aa",
                                     dst_mac="02:00:00:00:00:bb", **ips))
    request = (1, build_roce_frame(0x0A, bytes(64), reth=(0, 0, 64), **ips))
    scenario = {"inputs": [request] * 3, "outputs": [[credit], [], [result, credit]],
                "expired": [(1, [result, result, credit]), (3, [result])],
                # frames out before each frame in: none; the first's CREDIT; it and the deadline's three
                "after": [0, 1, 4]}
    assert list(frames_sent(scenario)) == [credit, result, result, credit, result, credit, result]
    assert gates_past_droppable(scenario) == [0, 1, 2]
    assert gates_past_droppable({**scenario, "after": [0, 1, 7]}) == [0, 1, 3]
