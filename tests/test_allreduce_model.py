"""All-reduce end to end on the golden model: emulated RC workers, faults, credits, several jobs.

The expected result is computed from the inputs alone (netreduce.sim.fp.tree_sum over the workers,
element by element); the model is never asked what it thinks the answer is.
"""

import numpy as np
import pytest

from netreduce.host.faults import FaultSpec
from netreduce.host.network import build_allreduce, expected_sum, record_frames
from netreduce.host.packets import build_roce_frame
from netreduce.host.protocol import AggHeader


def run(time_limit_ns=2 * 10**9, **kwargs):
    network, jobs, inputs = build_allreduce(**kwargs)
    status = network.run(time_limit_ns=time_limit_ns)
    return network, jobs, inputs, status


def assert_every_worker_has_the_sum(network, jobs, inputs, only=None):
    for job in jobs:
        if only is not None and job.job not in only:
            continue
        expected = expected_sum(job, inputs[job.job])
        for worker in network.workers:
            if worker.job is job:
                assert worker.result.dtype == expected.dtype
                np.testing.assert_array_equal(worker.result, expected)


@pytest.mark.parametrize("workers,dtype,mtu,message_packets,nbytes", [
    (1, "fp32", 256, 1, 1000),
    (2, "fp32", 1024, 4, 40_000),
    (3, "bf16", 256, 3, 6_002),
    (8, "fp16", 4096, 2, 100_000),
    (5, "fp32", 512, 1, 4),
])
def test_clean_network(workers, dtype, mtu, message_packets, nbytes):
    network, jobs, inputs, status = run(workers=workers, dtype=dtype, mtu=mtu, message_packets=message_packets,
                                        nbytes=nbytes, seed=workers)
    assert status == "done"
    assert_every_worker_has_the_sum(network, jobs, inputs)
    summary = network.summary()
    assert summary["retransmissions"] == 0 and summary["errors"] == []
    counters = summary["switch"]
    packets = sum(-(-(16 + count * inputs[0].itemsize) // mtu) for _, count in network.workers[0].layout)
    assert counters["aggregated"] == counters["results_sent"] == workers * packets
    assert not any(v for k, v in counters.items() if k.startswith(("drop_", "passthrough_", "duplicates_")))


@pytest.mark.parametrize("seed", [1, 2])
def test_faults_on_both_sides(seed):
    spec = FaultSpec(loss=0.03, duplicate=0.03, reorder=0.03, corrupt=0.02)
    network, jobs, inputs, status = run(workers=3, nbytes=30_000, mtu=256, seed=seed, faults_up=spec,
                                        faults_down=spec)
    assert status == "done"
    assert_every_worker_has_the_sum(network, jobs, inputs)
    summary = network.summary()
    assert summary["retransmissions"] > 0
    assert summary["drops"]["drop_bad_icrc"] == summary["drops"].get("up_corrupt", 0)
    counters = summary["switch"]
    assert counters["passthrough_gap"] > 0 and counters["duplicates_answered"] > 0


def test_psn_wraps_inside_messages():
    network, jobs, inputs, status = run(workers=2, nbytes=20_000, mtu=256, message_packets=8,
                                        start_psn=(1 << 24) - 5, seed=3)
    assert status == "done"
    assert_every_worker_has_the_sum(network, jobs, inputs)
    for host in network.hosts:
        for responder in host.responders.values():
            assert responder.expected_psn < 1000          # it went through 2^24 - 1 -> 0


def test_two_jobs_keep_their_own_sums():
    network, jobs, inputs, status = run(workers=3, jobs=2, nbytes=10_000, seed=4)
    assert status == "done"
    assert not np.array_equal(inputs[0], inputs[1])
    assert_every_worker_has_the_sum(network, jobs, inputs)


def test_small_credit_window_stalls_nobody():
    network, jobs, inputs, status = run(workers=3, nbytes=50_000, mtu=256, message_packets=2,
                                        message_slots=1, seed=5)
    assert status == "done"
    assert_every_worker_has_the_sum(network, jobs, inputs)
    counters = network.summary()["switch"]
    assert counters["credits_sent"] > 0 and counters["drop_no_credit"] == 0


def test_a_host_exceeding_its_credits_harms_only_its_own_job():
    network, jobs, inputs = build_allreduce(workers=2, jobs=2, nbytes=20_000, mtu=256, message_packets=2,
                                            message_slots=1, seed=6)
    greedy = next(w for w in network.workers if w.job.job == 0 and w.index == 0)
    greedy.allowed = 1 << 30            # ignores the switch's credits: posts every message at once
    status = network.run(time_limit_ns=2 * 10**9)
    counters = network.summary()["switch"]
    assert counters["drop_no_credit"] > 0
    assert_every_worker_has_the_sum(network, jobs, inputs, only={1})
    # job 0 either recovers through RC retries or fails; what it received is never a wrong sum
    expected = expected_sum(jobs[0], inputs[0])
    for worker in network.workers:
        if worker.job.job == 0:
            for seq in worker.received:
                start, count = worker.layout[seq]
                np.testing.assert_array_equal(worker.result[start:start + count],
                                              expected[start:start + count])
    assert status in ("done", "failed")


def test_spoofed_connection_cannot_touch_a_sum():
    network, jobs, inputs = build_allreduce(workers=2, nbytes=8_000, mtu=256, seed=7)
    victim = network.workers[0]
    rogue_header = AggHeader(job=0, msg_seq=0, elements=60)
    for i, qpn in enumerate((victim.requester.remote.qpn, 0x999)):
        # the job's responder QPN from a stranger's address, and an unknown QPN from a worker's address
        src_ip = "10.0.9.9" if i == 0 else victim.host.ip
        frame = build_roce_frame(0x0A, rogue_header.pack() + np.full(60, 1e30, np.float32).tobytes(),
                                 reth=(0, 0, 256), eth_dst=network.hosts[1].address.mac, src_ip=src_ip,
                                 dst_ip=network.hosts[1].address.ip, dest_qp=qpn, psn=0)
        network.at(1000 + i, network.hosts[0].send, frame, 1000 + i)
    status = network.run(time_limit_ns=10**9)
    assert status == "done"
    assert_every_worker_has_the_sum(network, jobs, inputs)
    assert network.summary()["switch"]["forwarded"] >= 2


def test_dead_link_ends_in_a_reported_failure_not_a_hang():
    network, jobs, inputs, status = run(workers=2, nbytes=4_000, seed=8, faults_down=FaultSpec(loss=1.0),
                                        timeout_ns=10_000, time_limit_ns=10**9)
    assert status == "failed"
    assert any("retry" in error.lower() for error in network.summary()["errors"])


def test_recorded_frames_go_into_the_ports_named():
    """``record_frames(..., ports=)``: frame i goes into port ``ports[i]``, and a frame of no connection
    leaves by its destination host's port."""
    network, _, _ = build_allreduce(workers=4, nbytes=64, ports=2)
    hosts = {host.port: host.address for host in network.hosts}
    frames = [build_roce_frame(0x04, bytes(2), dport=9, eth_dst=hosts[1 - p].mac, dst_ip=hosts[1 - p].ip)
              for p in (0, 1, 1)]
    recording = record_frames(network.switch_config, frames, ports=[0, 1, 1])
    assert [port for port, *_ in recording["inputs"]] == [0, 1, 1]
    assert [[port for port, _ in answers] for answers in recording["outputs"]] == [[1], [0], [0]]
