"""The attacks of netreduce.host.attacks against the golden model, end to end on the emulated network.

Each attack runs beside the same all-reduce without it (same seed, same configuration). The contract
(docs/ARCHITECTURE.md, "Switch behaviour" and "Trust model") says what each forged frame does, and that
it changes nothing else: so the attacked run's counters are the clean run's plus exactly the forged frames
under their counter, and every worker of every job holds the exact tree sum.
"""

import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from netreduce.host import attacks
from netreduce.host.attacks import NEAR_WRAP, attacker
from netreduce.host.faults import FaultSpec
from netreduce.host.network import build_allreduce, expected_sum
from netreduce.sim import switch_model
from netreduce.sim.roce_model import parse_frame
from netreduce.wire import msg_distance

# 3 workers on 2 ports: hosts 0 and 2 on port 0, host 1 on port 1; worker w writes to host w + 1
BASE = {"workers": 3, "jobs": 2, "nbytes": 6000, "mtu": 256, "ports": 2, "seed": 1, "start_psn": 100}


def run(*setups, **kwargs):
    network, jobs, inputs = build_allreduce(**{**BASE, **kwargs})
    for setup in setups:
        setup(network)
    status = network.run(time_limit_ns=10**9)
    return network, jobs, inputs, status


def assert_exact(network, jobs, inputs):
    for job in jobs:
        expected = expected_sum(job, inputs[job.job])
        for worker in network.workers:
            if worker.job is job:
                np.testing.assert_array_equal(worker.result, expected)


def added(clean, attacked):
    """The counters the attack added to the clean run's."""
    a, b = clean.engine.counters, attacked.engine.counters
    return {name: b[name] - a[name] for name in b if b[name] != a[name]}


@functools.cache
def clean_run():
    network, jobs, inputs, status = run()
    assert status == "done"
    assert_exact(network, jobs, inputs)
    return network


def attacked_run(*setups, **kwargs):
    network, jobs, inputs, status = run(*setups, **kwargs)
    assert status == "done"
    assert_exact(network, jobs, inputs)
    for host in network.extra_hosts:
        assert sum(host.stats.values()) == 0          # nothing ever reached an attacker
    return network


@pytest.mark.parametrize("port", [0, 1], ids=["worker's port", "other port"])
def test_spoofed_contributions(port):
    """Forged contributions to worker 0 of job 0 (on port 0), with poison and other lengths: on the
    worker's own port only the source MAC differs."""
    network = attacked_run(attacks.spoofed_contributions, extra_hosts=[attacker(port)])
    forged = added(clean_run(), network)
    assert forged == {"frames_in": forged["frames_in"], "drop_spoofed": forged["frames_in"]}
    assert forged["frames_in"] >= 4


@pytest.mark.parametrize("port", [0, 1])
def test_forged_acks_right_after_results(port):
    network = attacked_run(attacks.forged_acks, extra_hosts=[attacker(port)])
    forged = added(clean_run(), network)
    results = network.engine.counters["results_sent"]
    assert forged == {"frames_in": results, "drop_spoofed": results}       # one per result


def lose_once(qpn, psn):
    """A ``FaultSpec.select`` that loses the first WRITE with this destination QP and PSN."""
    lost = []

    def select(_index, frame):
        h = parse_frame(frame).header
        if not lost and h["roce"] and h["bth_opcode"] != 0x11 and (h["bth_dest_qp"], h["bth_psn"]) == (qpn, psn):
            lost.append(frame)
            return "loss"
        return None
    return select, lost


def forged_acks_then_a_lost_result(which):
    """Forged ACKs follow every result; the result of worker 0's packet ``which`` (an index, or "last") to
    its receiver is lost on the way."""
    network, _, _ = build_allreduce(**BASE)
    worker, conn = network.workers[0], network.switch_config.connections[0]
    if which == "last":
        which = sum(-(-(16 + count * 4) // BASE["mtu"]) for _, count in worker.layout) - 1
    select, lost = lose_once(conn.responder_qpn, (conn.start_psn + which) % (1 << 24))
    network, jobs, inputs, status = run(attacks.forged_acks, extra_hosts=[attacker(1)],
                                        faults_down=FaultSpec(select=select))
    return network, jobs, inputs, status, lost


@pytest.mark.parametrize("which", [5, "last"], ids=["middle (NAK)", "last (timeout)"])
def test_forged_acks_then_the_real_result_lost(which):
    """The trust model's second item: ACKs forged right after the results leave would release the message
    slot before the receiver has the result; when the result is then lost, the requester's retransmission
    would find nothing to answer from and pass through as a raw contribution. Bound, the ACKs are dropped
    and the retransmission is answered with the sum."""
    network, jobs, inputs, status, lost = forged_acks_then_a_lost_result(which)
    assert lost and status == "done"
    assert_exact(network, jobs, inputs)
    counters = network.engine.counters
    assert counters["drop_spoofed"] >= counters["results_sent"]
    assert counters["duplicates_answered"] >= 1 and counters["passthrough_stale"] == 0


def test_without_the_binding_the_forged_acks_break_the_run(monkeypatch):
    """The scenario above is sharp: let the forged ACKs count, and the run does not end with the sum."""
    monkeypatch.setattr(switch_model._Connection, "ack_bound", lambda self, port, h: True)
    network, jobs, inputs, status, lost = forged_acks_then_a_lost_result(5)
    assert lost
    exact = all(np.array_equal(w.result, expected_sum(w.job, inputs[w.job.job])) for w in network.workers)
    assert status != "done" or not exact


def test_acks_ahead_of_sent_from_the_bound_place():
    network = attacked_run(attacks.acks_ahead)
    forged = added(clean_run(), network)
    n = forged["frames_in"]
    assert n >= 2
    assert forged == dict.fromkeys(("frames_in", "frames_out", "forwarded", "acks_seen", "acks_ahead"), n)
    requester = network.hosts[0].requesters[network.switch_config.connections[0].requester_qpn]
    assert requester.stats["stale_responses"] > 0                 # they reached it, and it ignored them


@pytest.mark.parametrize("port,forge_mac", [(0, True), (0, False), (1, True)],
                         ids=["worker's port and MAC", "worker's port", "other port"])
def test_forged_retransmissions_to_read_a_sum(port, forge_mac):
    network = attacked_run(functools.partial(attacks.forged_retransmissions, forge_mac=forge_mac),
                           extra_hosts=[attacker(port)])
    forged = added(clean_run(), network)
    packets = network.engine.counters["results_sent"] // (2 * BASE["workers"])    # worker 0's of job 0
    assert forged == {"frames_in": packets, "drop_spoofed": packets}


def test_forged_credits_and_control_packets():
    network = attacked_run(attacks.forged_credits, extra_hosts=[attacker(1)])
    forged = added(clean_run(), network)
    # per worker and round, three in the switch's name and three other control packets (the run may end
    # with a round partly on its way)
    n, spoofed = forged["frames_in"], forged["drop_spoofed"]
    assert forged == {"frames_in": n, "drop_spoofed": spoofed, "drop_control": n - spoofed}
    assert n >= 6 and abs(2 * spoofed - n) <= 3
    model = network.engine.model
    for worker in network.workers:        # each worker's window is the switch's, never beyond
        job = model.jobs[worker.job.job]
        assert msg_distance(worker.allowed, job.oldest + job.config.message_slots - 1) <= 0


@pytest.mark.parametrize("udp_payload", [0, 8, 11])
def test_short_credit_requests(udp_payload):
    network = attacked_run(functools.partial(attacks.short_credit_requests, udp_payload=udp_payload))
    forged = added(clean_run(), network)
    assert forged == {"frames_in": forged["frames_in"], "drop_control": forged["frames_in"]}


def test_message_numbers_cross_2_32():
    network, jobs, inputs, status = run(start_msg=NEAR_WRAP)
    assert status == "done"
    assert_exact(network, jobs, inputs)
    assert added(clean_run(), network) == {}
    worker = network.workers[0]
    assert worker.msg_seq(0) == NEAR_WRAP and worker.msg_seq(worker.messages - 1) == worker.messages - 4
    assert {job.oldest for job in network.engine.model.jobs.values()} == {worker.messages - 3}


def test_greedy_worker_across_2_32():
    """A worker that ignores its credits while its job crosses 2^32: what it sends beyond the window is
    dropped (``drop_no_credit``), its requester retries, and every sum is exact."""
    network = attacked_run(attacks.greedy_worker, start_msg=NEAR_WRAP)
    assert network.engine.counters["drop_no_credit"] > 0


def test_all_attacks_at_once_across_2_32_on_both_ports():
    setups = (attacks.spoofed_contributions, functools.partial(attacks.spoofed_contributions, attacker=1, job=1,
                                                               worker=1),
              attacks.forged_acks, attacks.forged_retransmissions, attacks.forged_credits, attacks.acks_ahead,
              attacks.short_credit_requests)
    network = attacked_run(*setups, extra_hosts=[attacker(0), attacker(1, index=1)], start_msg=NEAR_WRAP)
    counters = network.engine.counters
    assert counters["drop_spoofed"] > 0 and counters["drop_control"] > 0 and counters["acks_ahead"] > 0


@settings(max_examples=12, deadline=None)
@given(start_msg=st.one_of(st.integers(NEAR_WRAP - 8, (1 << 32) - 1), st.integers(0, (1 << 32) - 1)),
       slots=st.sampled_from([1, 2, 4]), workers=st.integers(1, 4), seed=st.integers(0, 1000))
def test_any_start_msg_gives_the_exact_sum_under_attack(start_msg, slots, workers, seed):
    network, jobs, inputs, status = run(attacks.forged_acks, attacks.spoofed_contributions,
                                        workers=workers, jobs=1, nbytes=3000, message_slots=slots, seed=seed,
                                        start_psn=None, start_msg=start_msg, extra_hosts=[attacker(1)])
    assert status == "done"
    assert_exact(network, jobs, inputs)


FAULTS = FaultSpec(loss=0.05, duplicate=0.05, reorder=0.05, corrupt=0.05)
DIAGONAL = {(2, "fp32"), (3, "bf16"), (8, "fp16")}


# the fast tier takes the diagonal (each N and each format once); the full suite the whole matrix
@pytest.mark.parametrize("workers, dtype", [
    pytest.param(workers, dtype, marks=() if (workers, dtype) in DIAGONAL else pytest.mark.slow)
    for workers in (2, 3, 8) for dtype in ("fp32", "bf16", "fp16")])
def test_fault_matrix_under_attack(workers, dtype):
    """5% loss, duplication, reordering and corruption on both sides of the switch, an attacker forging
    ACKs, contributions, retransmissions and credits throughout, message numbers crossing 2^32: every run
    ends done with the exact sums."""
    for seed in (1, 2):
        network, jobs, inputs, status = run(
            attacks.forged_acks, attacks.spoofed_contributions, attacks.forged_retransmissions,
            attacks.forged_credits, workers=workers, jobs=1, nbytes=4000, dtype=dtype, seed=seed + workers,
            start_psn=None, start_msg=NEAR_WRAP, faults_up=FAULTS, faults_down=FAULTS, credit_timeout_ns=20_000,
            extra_hosts=[attacker(1)])
        assert status == "done", network.summary()["errors"]
        assert_exact(network, jobs, inputs)
        counters = network.engine.counters
        assert counters["drop_spoofed"] > 0 and counters["drop_bad_icrc"] > 0
