"""The bounded-loss worker (netreduce.host.lossy) on its own and on the emulated network: messages of one
packet per layer with their class's DSCP, zero fill within the loss bound, recovery past it, rescaling on
and off; and, end to end through the golden model, exact partial sums, deadlines that fire under loss
before the switch and never without it."""

import random
from collections import deque

import numpy as np
import pytest

from netreduce.host.classify import ClassMap
from netreduce.host.faults import FaultSpec
from netreduce.host.lossy import LossyWorker, ResultState, lossy_layout, popcount
from netreduce.host.network import build_allreduce, clocks_of_us, default_deadline_us, expected_partial_sum
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame, parse_control_payload
from netreduce.host.rc import Memory
from netreduce.host.worker import HostAddress
from netreduce.sim.fp import tree_sum
from netreduce.sim.roce_model import parse_frame
from netreduce.sim.switch_model import JobConfig
from netreduce.wire import CONTROL_PORT, ControlType

SWITCH = HostAddress(0x024E52000001, "10.0.255.1")
HOST = HostAddress(0x020000000001, "10.0.0.1")
RESULT_VA = 0x10_0000
MTU = 64                        # 12 binary32 elements a message
TIMEOUT = 1000


class Requester:
    """What a LossyWorker asks of its UC requester: it records the writes posted, which complete at once."""

    error = None

    def __init__(self):
        self.posted = []
        self.completions = deque()

    def post_write(self, data, *, va, rkey, immediate, dscp):
        self.posted.append({"data": data, "va": va, "rkey": rkey, "immediate": immediate, "dscp": dscp})
        self.completions.append(len(self.posted) - 1)


class Responder:
    def __init__(self):
        self.completions = deque()


def make_worker(elements=48, workers=3, index=1, slots=8, layers=None, loss_bound=0.0, rescale=True, **kwargs):
    job = JobConfig(job=3, workers=workers, mtu=MTU, message_slots=slots, traffic_class="lossy", deadline_clocks=50)
    memory = Memory()
    memory.register(RESULT_VA, 64 * MTU, 0x77)
    tensor = np.arange(1, elements + 1, dtype=np.float32).view(np.uint32)
    return LossyWorker(job, index, tensor, requester=Requester(), responder=Responder(), memory=memory,
                       result_va=RESULT_VA, send_rkey=0x88, host=HOST, switch=SWITCH, control_port=CONTROL_PORT,
                       receive_connection=index - 1, layers=layers, result_timeout_ns=TIMEOUT,
                       request_timeout_ns=TIMEOUT // 2, loss_bound=loss_bound, rescale=rescale,
                       credit_timeout_ns=10 * TIMEOUT, **kwargs)


def deliver(worker, i, values, bitmap):
    """The switch's result of message i: written into the receive buffer, then completed."""
    start, count = worker.layout[i]
    data = AggHeader(3, worker.msg_seq(i), count).pack() + np.asarray(values, "<f4").tobytes()
    va = RESULT_VA + i * MTU
    worker.memory._write(0x77, va, data)
    worker.responder.completions.append((va, len(data), bitmap))


def requests(frames):
    return [parse_control_payload(f[42:54]) for f in frames]


def test_messages_are_one_packet_per_layer_with_their_class():
    layers = [("conv", 30), ("bn", 2), ("fc", 16)]
    worker = make_worker(layers=layers, slots=16)
    assert lossy_layout(worker.job, [30, 2, 16]) == [(0, 12), (12, 12), (24, 6), (30, 2), (32, 12), (44, 4)]
    worker.pump(0)
    posted = worker.requester.posted
    assert len(posted) == 6
    assert [p["va"] for p in posted] == [RESULT_VA + i * MTU for i in range(6)]
    assert {p["immediate"] for p in posted} == {1 << 1} and {p["rkey"] for p in posted} == {0x88}
    default = ClassMap.default()
    # layer i of 3 is in group i * 4 // 3; a layer's packets grow in magnitude here, so do their buckets
    # (three packets: quartile edges below the second's magnitude, at it, and above it)
    assert [p["dscp"] for p in posted] == [default.dscp_of(0, 0), default.dscp_of(0, 1), default.dscp_of(0, 3),
                                          default.dscp_of(1, 0), default.dscp_of(2, 0), default.dscp_of(2, 3)]
    headers = [AggHeader.unpack(p["data"]) for p in posted]
    assert [h.elements for h in headers] == [12, 12, 6, 2, 12, 4]
    assert [h.priority for h in headers] == [p["dscp"] for p in posted]


def test_results_are_stored_with_their_contributors():
    worker = make_worker(elements=24)
    worker.pump(0)
    deliver(worker, 1, np.full(12, 2.5), 0b101)
    deliver(worker, 0, np.full(12, 7.0), 0b111)
    worker.pump(10)
    assert worker.done and worker.received == {0, 1} and worker.state == [ResultState.RECEIVED] * 2
    assert list(worker.contributors) == [0b111] * 12 + [0b101] * 12
    assert worker.result.view(np.float32).tolist() == [7.0] * 12 + [2.5] * 12
    deliver(worker, 0, np.full(12, 9.0), 0b001)             # a copy (an answer to a request, say): ignored
    worker.pump(20)
    assert worker.duplicate_results == 1 and worker.result.view(np.float32)[0] == 7.0


def test_rescaling_divides_by_the_contributors_and_zero_fill_by_n():
    worker = make_worker(elements=24, loss_bound=1.0)
    worker.pump(0)
    deliver(worker, 0, np.full(12, 6.0), 0b011)
    worker.pump(TIMEOUT)                                    # message 1 never comes: zero-filled
    assert worker.done and worker.filled == {1} and worker.zero_filled_elements == 12
    assert np.array_equal(worker.average(), [3.0] * 12 + [0.0] * 12)
    worker.rescale = False
    assert np.array_equal(worker.average(), [2.0] * 12 + [0.0] * 12)
    assert popcount(np.array([0, 0b1011, 0xFFFFFFFF], np.uint32)).tolist() == [0, 3, 32]


def test_zero_fill_within_the_bound_recovery_past_it():
    # 4 messages of 12 elements; a bound of 12/48 lets one message be filled, not two
    worker = make_worker(elements=48, loss_bound=0.25)
    worker.pump(0)
    assert worker.pump(TIMEOUT - 1) == []
    frames = worker.pump(TIMEOUT)                          # nothing came
    assert worker.filled == {0}
    asked = requests(frames)
    assert [(m.type, m.job, m.worker, m.value) for m in asked] == [
        (ControlType.RESULT_REQUEST, 3, 0, 1), (ControlType.RESULT_REQUEST, 3, 0, 2),
        (ControlType.RESULT_REQUEST, 3, 0, 3)]
    assert parse_frame(frames[0]).header["ip_dst"] == 0x0A00FF01        # to the switch
    deliver(worker, 2, np.ones(12), 0b111)                 # an answer
    frames = worker.pump(TIMEOUT + 10)
    assert worker.recovered == 1 and frames == []
    # unanswered: asked again every request timeout, request_retries times, then filled all the same
    for k in range(1, 4):
        assert [m.value for m in requests(worker.pump(TIMEOUT + k * TIMEOUT // 2))] == ([1, 3] if k < 3 else [])
    assert worker.done and worker.filled == {0, 1, 3} and worker.zero_filled_elements == 36
    assert worker.loss_fraction == 0.75 and worker.result_requests == 7


def test_past_the_bound_a_later_result_makes_the_worker_ask_at_once():
    worker = make_worker(elements=48, loss_bound=0.0)
    worker.pump(0)
    deliver(worker, 2, np.ones(12), 0b111)
    assert [m.value for m in requests(worker.pump(100))] == [0, 1]
    deliver(worker, 3, np.ones(12), 0b111)
    assert requests(worker.pump(105)) == []                # asked 5 ns ago: not again yet
    deliver(worker, 0, np.ones(12), 0b110)
    worker.pump(200)
    assert worker.recovered == 1 and worker.state[1] is ResultState.PENDING


def test_waiting_for_credit_asks_for_the_window_too():
    worker = make_worker(elements=48, slots=2)             # window 1: one message at a time
    worker.pump(0)
    assert len(worker.requester.posted) == 1
    frames = worker.pump(10 * TIMEOUT)
    kinds = [(m.type, m.value) for m in requests(frames)]
    assert (ControlType.CREDIT_REQUEST, 0) in kinds and (ControlType.RESULT_REQUEST, 0) in kinds
    credit = ControlMessage(ControlType.CREDIT, 3, 1, 1)
    worker.on_control(credit, mac=SWITCH.mac, ip=SWITCH.ip, port=CONTROL_PORT)
    worker.pump(10 * TIMEOUT + 1)
    assert len(worker.requester.posted) == 2


def test_bad_results_are_errors():
    worker = make_worker(elements=24)
    worker.pump(0)
    deliver(worker, 0, np.ones(12), 0b1000)                # a worker the job does not have
    deliver(worker, 1, np.ones(12), None)                  # no immediate
    worker.pump(1)
    assert len(worker.errors) == 2 and worker.failed
    with pytest.raises(ValueError, match="not a bounded-loss job"):
        LossyWorker(JobConfig(job=1, workers=1), 0, np.zeros(1, np.uint32), requester=None, responder=None,
                    memory=None, result_va=0, send_rkey=0, host=HOST, switch=SWITCH, control_port=CONTROL_PORT,
                    receive_connection=0)


def test_a_control_frame_is_what_build_control_frame_makes():
    worker = make_worker(elements=12, loss_bound=0.0)
    worker.pump(0)
    (frame,) = worker.pump(TIMEOUT)
    assert frame == build_control_frame(ControlMessage(ControlType.RESULT_REQUEST, 3, 0, 0), src_mac=HOST.mac,
                                        dst_mac=SWITCH.mac, src_ip=HOST.ip, dst_ip=SWITCH.ip)


# --- end to end, through the golden model -------------------------------------------------------------------

BASE = {"workers": 4, "nbytes": 12000, "mtu": 256, "seed": 3, "traffic_class": "lossy"}


def run(**kwargs):
    network, jobs, inputs = build_allreduce(**{**BASE, **kwargs})
    status = network.run(time_limit_ns=10**9)
    return network, jobs, inputs, status


def assert_partial_sums_exact(network, inputs):
    for worker in network.workers:
        expected = expected_partial_sum(worker.job, inputs[worker.job.job], worker.contributors)
        np.testing.assert_array_equal(worker.result, expected)


def test_without_loss_every_result_is_whole_and_no_deadline_fires():
    network, jobs, inputs, status = run(jobs=2, ports=2, faults_up=FaultSpec(duplicate=0.1, reorder=0.1),
                                        faults_down=FaultSpec(duplicate=0.1, reorder=0.1))
    assert status == "done"
    counters = network.engine.counters
    assert counters["deadline_completions"] == 0 and counters["late"] == 0
    assert all((w.contributors == 0b1111).all() and not w.filled for w in network.workers)
    full = tree_sum("fp32", inputs[0]).astype(np.uint32)
    assert all(np.array_equal(w.result, full) for w in network.workers if w.job.job == 0)


def test_loss_before_the_switch_fires_deadlines_and_partial_sums_are_exact():
    network, jobs, inputs, status = run(faults_up=FaultSpec(loss=0.05), loss_bound=1.0)
    assert status == "done"
    counters = network.engine.counters
    assert counters["deadline_completions"] > 0
    partial = [w for w in network.workers if ((w.contributors != 0) & (w.contributors != 0b1111)).any()]
    assert partial
    assert_partial_sums_exact(network, inputs)
    histogram = network.engine.model.contributors
    assert sum(histogram.values()) == sum(counters[f"contributors_{n}"] for n in range(5))
    assert sum(histogram.values()) <= len(network.workers[0].layout)


def results_lost(rate, seed=0):
    """A fault injector's rule that loses ``rate`` of the RoCE frames (the results) and nothing else."""
    draw = random.Random(seed)

    def select(_index, frame):
        return "loss" if parse_frame(frame).header["roce"] and draw.random() < rate else None
    return FaultSpec(select=select)


def test_loss_after_the_switch_fires_no_deadline_and_is_recovered_past_the_bound():
    """Every contribution reaches the switch, so every message completes whole, before its deadline; the
    results lost on the way down are asked for again (bound 0) or zero-filled (bound 1). (Lost CREDITs would
    delay a worker by a credit timeout, which can outlast a deadline: here only results are lost.)"""
    network, jobs, inputs, status = run(faults_down=results_lost(0.05), loss_bound=0.0)
    assert status == "done"
    counters = network.engine.counters
    assert counters["deadline_completions"] == 0 and counters["late"] == 0
    assert counters["results_resent"] > 0 and sum(w.recovered for w in network.workers) > 0
    assert_partial_sums_exact(network, inputs)
    # within a bound of 1 nothing is asked for: what is lost is zero-filled
    network, jobs, inputs, status = run(faults_down=results_lost(0.05), loss_bound=1.0)
    assert status == "done" and network.engine.counters["result_requests"] == 0
    assert network.engine.counters["deadline_completions"] == 0
    assert sum(w.zero_filled_elements for w in network.workers) > 0
    assert_partial_sums_exact(network, inputs)


def test_frames_carry_their_class_and_a_port_per_packet():
    network, jobs, inputs = build_allreduce(**{**BASE, "nbytes": 4000})
    seen = []
    network.taps.append(lambda port, frame: seen.append(parse_frame(frame).header))
    assert network.run(time_limit_ns=10**9) == "done"
    results = [h for h in seen if h["roce"]]
    assert {h["bth_opcode"] for h in results} == {0x2B}
    assert {h["ip_dscp"] for h in results} <= set(range(32, 48))
    # a message's results are built from one template, and the messages left from ports of their own
    by_message = {}
    for h in results:
        by_message.setdefault(h["reth_va"], set()).add(h["udp_sport"])
    assert all(len(ports) == 1 for ports in by_message.values())
    assert len(set.union(*by_message.values())) > len(by_message) // 2


def test_default_deadline_and_clocks():
    assert clocks_of_us(6.4, 64) == 1000 and clocks_of_us(0.001, 64) == 1
    assert clocks_of_us(1, 512) == 323          # 322.27 clocks in a microsecond, rounded up
    assert default_deadline_us(workers=8, mtu=4096, width=64) > default_deadline_us(workers=8, mtu=4096, width=512)
