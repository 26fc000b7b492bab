"""The worker (netreduce.host.worker) on its own: credits only from the switch, message numbers modulo
2^32 from the job's start_msg, results checked against the number of the message at their place."""

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from netreduce.host.network import build_allreduce
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame, ip_to_int
from netreduce.host.rc import Memory
from netreduce.host.worker import HostAddress, Worker
from netreduce.sim.switch_model import JobConfig
from netreduce.wire import CONTROL_PORT, ControlType

SWITCH = HostAddress(0x024E52000001, "10.0.255.1")
HOST = HostAddress(0x020000000001, "10.0.0.1")
STRANGER = HostAddress(0x02BAD0000001, "10.0.66.1")
RECV_VA = 0x10_0000


class Requester:
    """What a Worker asks of its RC requester: it records the writes posted."""

    error = None

    def __init__(self):
        self.posted = []
        self.completions = deque()

    def post_write(self, data, *, va, rkey):
        self.posted.append((va, data))


class Responder:
    def __init__(self):
        self.completions = deque()


def make_worker(start_msg=0, slots=4, messages=6, mtu=64, message_packets=1):
    job = JobConfig(job=3, workers=2, mtu=mtu, message_packets=message_packets, message_slots=slots,
                    start_msg=start_msg)
    per_message = (mtu * message_packets - 16) // 4
    memory = Memory()
    memory.register(RECV_VA, messages * mtu * message_packets, 0x77)
    return Worker(job, 1, np.arange(messages * per_message, dtype=np.uint32), requester=Requester(),
                  responder=Responder(), memory=memory, send_va=0, send_rkey=1, recv_va=RECV_VA, host=HOST,
                  switch=SWITCH, control_port=CONTROL_PORT, credit_timeout_ns=1000)


def credit(value, job=3, index=1):
    return ControlMessage(ControlType.CREDIT, job, index, value)


def posted_seqs(worker):
    return [AggHeader.unpack(data).msg_seq for _, data in worker.requester.posted]


def test_credits_count_only_from_the_switchs_mac_ip_and_port():
    worker = make_worker(slots=2)
    switch = {"mac": SWITCH.mac, "ip": ip_to_int(SWITCH.ip), "port": CONTROL_PORT}
    for forged in ({"mac": STRANGER.mac}, {"ip": ip_to_int(STRANGER.ip)}, {"port": CONTROL_PORT + 1}):
        worker.on_control(credit(5), **{**switch, **forged})
        assert worker.allowed == 1
    worker.on_control(credit(5, job=4), **switch)
    worker.on_control(credit(5, index=0), **switch)
    worker.on_control(ControlMessage(ControlType.CREDIT_REQUEST, 3, 1, 5), **switch)
    assert worker.allowed == 1
    worker.on_control(credit(3), mac="02:4e:52:00:00:01", ip=SWITCH.ip, port=CONTROL_PORT)
    assert worker.allowed == 3
    worker.on_control(credit(2), **switch)           # behind: the window never shrinks
    assert worker.allowed == 3


def test_host_passes_each_credit_with_its_frames_source():
    """Through the emulated host: a CREDIT in the switch's name from elsewhere, or one whose UDP length does
    not hold the message, moves nothing."""
    network, _, _ = build_allreduce(workers=2, nbytes=64)
    host, worker = network.hosts[0], network.workers[0]
    switch = network.switch_config
    start = worker.allowed

    def frame(value, src_mac=switch.mac, src_ip=switch.ip):
        return build_control_frame(ControlMessage(ControlType.CREDIT, 0, 0, value), src_mac=src_mac,
                                   dst_mac=host.address.mac, src_ip=src_ip, dst_ip=host.address.ip)
    host.receive(frame(100, src_mac=STRANGER.mac), 0)
    host.receive(frame(100, src_ip=STRANGER.ip), 0)
    short = bytearray(frame(100))
    short[38:40] = (8 + 8).to_bytes(2, "big")         # the value is after the UDP end
    host.receive(bytes(short), 0)
    assert worker.allowed == start
    host.receive(frame(100), 0)
    assert worker.allowed == 100


@pytest.mark.parametrize("start_msg", [0, (1 << 32) - 3, (1 << 32) - 1])
def test_messages_are_numbered_from_start_msg_modulo_2_32(start_msg):
    worker = make_worker(start_msg=start_msg, slots=4, messages=6)
    assert worker.allowed == (start_msg + 3) % (1 << 32)
    assert worker.pump(0) == []
    assert posted_seqs(worker) == [(start_msg + i) % (1 << 32) for i in range(4)]
    assert [va for va, _ in worker.requester.posted] == [i * 64 for i in range(4)]    # placed by index
    requests = worker.pump(1000)                         # waiting for a credit: it asks
    assert len(requests) == 1 and worker.credit_requests == 1
    worker.on_control(credit((start_msg + 5) % (1 << 32)), mac=SWITCH.mac, ip=SWITCH.ip, port=CONTROL_PORT)
    worker.pump(1001)
    assert posted_seqs(worker) == [(start_msg + i) % (1 << 32) for i in range(6)]


@settings(max_examples=60, deadline=None)
@given(start_msg=st.integers(0, (1 << 32) - 1), slots=st.sampled_from([1, 2, 4, 8]),
       ahead=st.integers(-(1 << 31), (1 << 31) - 8))
def test_credit_window_compares_modulo_2_32(start_msg, slots, ahead):
    """A CREDIT moves the window only ahead (modulo 2^32), and the worker posts exactly the messages not
    ahead of it. (Numbers compare within half their space: a window reaching 2^31 or more past the next
    message means nothing, and the switch never opens one wider than K.)"""
    worker = make_worker(start_msg=start_msg, slots=slots, messages=12)
    first = worker.allowed
    value = (first + ahead) % (1 << 32)
    worker.on_control(credit(value), mac=SWITCH.mac, ip=SWITCH.ip, port=CONTROL_PORT)
    assert worker.allowed == (value if ahead > 0 else first)
    worker.pump(0)
    window = slots + max(ahead, 0)
    assert posted_seqs(worker) == [(start_msg + i) % (1 << 32) for i in range(min(12, window))]


def test_results_are_checked_against_the_wrapped_number_at_their_place():
    start_msg = (1 << 32) - 1
    worker = make_worker(start_msg=start_msg, slots=4, messages=2)
    for index, seq in ((0, start_msg), (1, 0)):
        data = AggHeader(3, seq, 12).pack() + np.full(12, 7 + index, np.uint32).tobytes()
        worker.memory._write(0x77, RECV_VA + 64 * index, data)
        worker.responder.completions.append((RECV_VA + 64 * index, len(data), None))
    worker.pump(0)
    assert worker.errors == [] and worker.received == {0, 1}
    assert list(worker.result) == [7] * 12 + [8] * 12
    # the unwrapped number (1 for the second message) names another message
    data = AggHeader(3, 1, 12).pack() + bytes(48)
    worker.memory._write(0x77, RECV_VA + 64, data)
    worker.responder.completions.append((RECV_VA + 64, len(data), None))
    worker.pump(0)
    assert len(worker.errors) == 1 and "unexpected message" in worker.errors[0]
