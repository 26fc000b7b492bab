"""The golden model's bounded-loss class against its contract (docs/ARCHITECTURE.md, "Bounded-loss class
(MLT)"): single-packet UC messages summed by their aggregation header in any order and from any port,
completed when full or at the deadline with the contributor bitmap in the immediate, late and duplicate
contributions, result requests, the binding of the class, the counters.

Frames are built with scapy (netreduce.host.packets) and read back with scapy's dissection; expected sums
are float32 additions in the tree's order, written out by hand, or netreduce.sim.fp.tree_sum with a mask.
"""

import numpy as np
import pytest

from netreduce.host.icrc import icrc_ok
from netreduce.host.packets import build_roce_frame, dissect
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame, parse_control_payload
from netreduce.registers import COUNTERS
from netreduce.sim.fp import tree_sum
from netreduce.sim.switch_model import (
    HISTOGRAM_COUNTERS,
    ConnectionConfig,
    JobClass,
    JobConfig,
    SlotState,
    SwitchConfig,
    SwitchModel,
)
from netreduce.wire import RESULT_RESENDS, ControlType

from references import (
    DEADLINE,
    JOB,
    RC_WRITE_ONLY,
    RESULT_VA,
    SWITCH_IP,
    SWITCH_MAC,
    WRITE_ONLY_IMM,
    Fabric,
    elements,
    host_ip,
    host_mac,
    responder_rkey,
)

NEW_COUNTERS = ("deadline_completions", "late", "result_requests", "results_resent",
                "result_requests_stale", "result_requests_refused") + HISTOGRAM_COUNTERS


def payload_of(frame):
    packet = dissect(frame)
    return bytes(packet["Raw"].load) if packet.haslayer("Raw") else b""


def masked_sum(values, bitmap):
    """tree_sum of the workers in ``bitmap``."""
    bits = np.stack([v.astype("<f4").view("<u4") for v in values])
    mask = [bool(bitmap >> w & 1) for w in range(len(values))]
    return tree_sum("fp32", bits, mask=mask).astype("<u4").view("<f4")


def results(out):
    """The RoCE frames of ``out`` (results), without the CREDITs."""
    return [(port, frame) for port, frame in out if dissect(frame).haslayer("BTH")]


def credits(out):
    return [parse_control_payload(bytes(dissect(frame)["UDP"].payload)[:12]) for port, frame in out
            if not dissect(frame).haslayer("BTH")]


def check_result(f, frame, w, seq, bitmap, values, psn_offset, template):
    """``frame`` is worker w's result of message ``seq``: addressed to w's responder from its requester, its
    PSN the connection's first plus ``psn_offset``, the responder's R_Key, ``bitmap`` in the immediate, the
    exact partial sum, and the rest of the template's frame (worker ``template``'s contribution)."""
    conn = f.conns[JOB, w]
    packet = dissect(frame)
    assert icrc_ok(frame)
    assert packet["BTH"].opcode == WRITE_ONLY_IMM and packet["ImmDt"].immdt == bitmap
    assert int(packet["Ether"].dst.replace(":", ""), 16) == conn.responder_mac
    assert int(packet["Ether"].src.replace(":", ""), 16) == conn.requester_mac
    assert (packet["IP"].src, packet["IP"].dst) == (conn.requester_ip, conn.responder_ip)
    assert packet["BTH"].dqpn == conn.responder_qpn
    assert packet["BTH"].psn == (conn.start_psn + psn_offset) % (1 << 24)
    assert packet["RETH"].rkey == responder_rkey(w) and packet["RETH"].va == RESULT_VA + 64 * seq
    assert packet["IP"].tos >> 2 == 32 + template and packet["UDP"].sport == 0xC000 + template
    body = payload_of(frame)
    head = AggHeader.unpack(body)
    assert (head.job, head.msg_seq, head.priority) == (JOB, seq, template)
    assert body[16:] == masked_sum(values, bitmap).tobytes()


# --- completion -------------------------------------------------------------------------------------------

def test_full_completion_sends_every_receiver_the_sum_with_the_bitmap():
    rng = np.random.default_rng(1)
    f = Fabric(workers=3, ports=3)
    v = [elements(rng) for _ in range(3)]
    # in any order, on any port
    assert f.send(f.contribution(2, 0, v[2]), port=0, now=5) == []
    assert f.send(f.contribution(0, 0, v[0]), port=1, now=6) == []
    out = f.send(f.contribution(1, 0, v[1]), port=2, now=7)
    got = results(out)
    assert len(got) == 3
    for w, (port, frame) in enumerate(got):
        assert port == (w + 1) % 3                  # the responder's port, from the forwarding table
        check_result(f, frame, w, 0, 0b111, v, 0, template=0)
    # the message is released: a CREDIT to every worker with the window W = K/2 = 2 past it
    assert [(m.type, m.worker, m.value) for m in credits(out)] == [(ControlType.CREDIT, w, 2) for w in range(3)]
    assert f.counters("aggregated", "results_sent", "deadline_completions", "contributors_3", "credits_sent") == {
        "aggregated": 3, "results_sent": 3, "deadline_completions": 0, "contributors_3": 1, "credits_sent": 3}
    assert f.switch.contributors == {3: 1} and f.switch.next_deadline is None


def test_deadline_completion_sums_exactly_the_contributors():
    rng = np.random.default_rng(2)
    f = Fabric(workers=4)
    v = [elements(rng) for _ in range(4)]
    f.send(f.contribution(3, 0, v[3]), now=10)
    assert f.switch.next_deadline == 10 + DEADLINE        # from the first contribution
    f.send(f.contribution(0, 0, v[0]), now=20)
    f.send(f.contribution(2, 0, v[2]), now=30)
    assert f.switch.advance(10 + DEADLINE - 1) == []
    out = f.switch.advance(10 + DEADLINE)
    got = results(out)
    assert len(got) == 4
    # worker 1 is absent: its sibling 0 passes through, and the root adds it to (2 + 3)
    by_hand = np.float32(v[0]) + (np.float32(v[2]) + np.float32(v[3]))
    assert payload_of(got[0][1])[16:] == by_hand.astype("<f4").tobytes()
    for w, (_, frame) in enumerate(got):
        check_result(f, frame, w, 0, 0b1101, v, 0, template=0)      # every worker, worker 1 too
    assert f.counters("deadline_completions", "contributors_3", "results_sent") == {
        "deadline_completions": 1, "contributors_3": 1, "results_sent": 4}
    assert len(credits(out)) == 4


def test_deadlines_fire_before_the_frame_that_comes_after_them():
    rng = np.random.default_rng(3)
    f = Fabric(workers=2)
    v = [elements(rng) for _ in range(2)]
    f.send(f.contribution(0, 0, v[0]), now=0)
    # worker 1's packet comes at the deadline: the message completed first, the packet is late
    out = f.send(f.contribution(1, 0, v[1]), now=DEADLINE)
    assert [dissect(frame)["ImmDt"].immdt for _, frame in results(out)] == [0b01, 0b01]
    assert f.counters("late", "deadline_completions", "aggregated") == {
        "late": 1, "deadline_completions": 1, "aggregated": 1}
    assert f.switch.counters["frames_out"] == 4       # two results, two CREDITs


def test_deadlines_fire_in_order_of_deadline_then_message():
    rng = np.random.default_rng(4)
    f = Fabric(workers=2, slots=8)                  # window 4
    f.send(f.contribution(0, 2, elements(rng)), now=50)     # opens 0 and 1 (empty) and 2 at clock 50
    f.send(f.contribution(1, 3, elements(rng)), now=60)     # opens 3 at clock 60
    f.send(f.contribution(1, 0, elements(rng)), now=70)
    out = f.switch.advance(1000)
    order = [AggHeader.unpack(payload_of(frame)).msg_seq for _, frame in results(out)]
    assert order == [0, 0, 2, 2, 3, 3]              # 1 had no contribution: nothing to send
    assert f.switch.contributors == {0: 1, 1: 3}
    assert f.counters("deadline_completions", "contributors_0", "contributors_1") == {
        "deadline_completions": 4, "contributors_0": 1, "contributors_1": 3}
    assert f.switch.jobs[JOB].oldest == 4 and f.switch.counters["credits_sent"] == 8


def test_deadlines_of_two_jobs_fire_in_order_of_deadline_then_job():
    """Messages of two bounded-loss jobs due in one wait: the earlier deadline first, whichever job opened
    first; deadlines at one clock in the order of the jobs."""
    rng = np.random.default_rng(5)
    for late_deadline, early_deadline, first_job in ((300, 100, JOB + 1), (210, 200, JOB)):
        f = Fabric(workers=2, deadline=late_deadline, lossy_too=early_deadline)
        f.send(f.contribution(0, 0, elements(rng), job=JOB), now=0)             # due at ``late_deadline``
        f.send(f.contribution(0, 0, elements(rng), job=JOB + 1), now=10)        # due at ``early_deadline`` + 10
        out = f.switch.advance(1000)
        jobs = [AggHeader.unpack(payload_of(frame)).job for _, frame in results(out)]
        assert jobs == [first_job] * 2 + [JOB + JOB + 1 - first_job] * 2
        assert f.counters("deadline_completions") == {"deadline_completions": 2}


def test_the_clock_never_goes_back():
    f = Fabric(workers=2)
    f.switch.advance(10)
    with pytest.raises(ValueError, match="goes back"):
        f.send(f.contribution(0, 0, np.ones(2, np.float32)), now=9)


# --- late, duplicates, order, window ------------------------------------------------------------------------

def test_duplicates_and_late_contributions_change_nothing():
    rng = np.random.default_rng(5)
    f = Fabric(workers=3)
    v = [elements(rng) for _ in range(3)]
    first = f.contribution(0, 0, v[0])
    f.send(first, now=0)
    assert f.send(f.contribution(0, 0, elements(rng))) == []    # another copy, other values: w's bit is set
    assert f.counters("duplicates_dropped", "aggregated") == {"duplicates_dropped": 1, "aggregated": 1}
    f.send(f.contribution(1, 0, v[1]), now=10)
    out = f.switch.advance(DEADLINE)
    assert {dissect(frame)["ImmDt"].immdt for _, frame in results(out)} == {0b011}
    assert f.send(first) == [] and f.switch.counters["duplicates_dropped"] == 2    # after completion, too
    assert f.send(f.contribution(2, 0, v[2])) == [] and f.switch.counters["late"] == 1
    assert f.switch.jobs[JOB].slots[0].bitmap == 0b011
    # message 4 reuses message 0's slot: 0 is behind the window, its packets are late
    for seq in (1, 2, 3):
        for w in range(3):
            f.send(f.contribution(w, seq, v[w]))
    f.send(f.contribution(0, 4, v[0]))
    assert f.switch.jobs[JOB].slots[0].seq == 4
    assert f.send(f.contribution(2, 0, v[2])) == [] and f.switch.counters["late"] == 2
    assert f.send(first) == [] and f.switch.counters["late"] == 3


def test_messages_in_any_order_from_any_port():
    rng = np.random.default_rng(6)
    f = Fabric(workers=4, ports=4, slots=8)
    v = {(seq, w): elements(rng) for seq in range(4) for w in range(4)}
    order = [(seq, w) for seq in range(4) for w in range(4)]
    rng.shuffle(order)
    out = []
    for i, (seq, w) in enumerate(order):
        out += f.send(f.contribution(w, seq, v[seq, w]), port=int(rng.integers(4)), now=i)
    got = results(out)
    assert len(got) == 16 and f.switch.counters["deadline_completions"] == 0
    for _, frame in got:
        seq = AggHeader.unpack(payload_of(frame)).msg_seq
        assert payload_of(frame)[16:] == masked_sum([v[seq, w] for w in range(4)], 0b1111).tobytes()
    # every receiver's results carry consecutive PSNs from its connection's first, in the order sent
    for w in range(4):
        psns = [dissect(frame)["BTH"].psn for _, frame in got if dissect(frame)["BTH"].dqpn == 0x200 + 16 * JOB + w]
        assert psns == [1000 * (w + 1) + i for i in range(4)]


def test_window_and_opening_of_earlier_messages():
    rng = np.random.default_rng(7)
    f = Fabric(workers=2, slots=4)                  # window 2: messages 0 and 1
    assert f.send(f.contribution(0, 2, elements(rng)), now=0) == []
    assert f.switch.counters["drop_no_credit"] == 1
    f.send(f.contribution(0, 1, elements(rng)), now=40)
    slots = f.switch.jobs[JOB].slots
    # message 0 opened with message 1, empty: its deadline runs from clock 40
    assert [(s.state, s.seq, s.opened, s.bitmap) for s in slots[:2]] == [
        (SlotState.OPEN, 0, 40, 0), (SlotState.OPEN, 1, 40, 0b01)]
    f.send(f.contribution(1, 0, elements(rng)), now=50)
    assert f.switch.next_deadline == 40 + DEADLINE


def test_other_opcodes_bad_headers_and_lengths():
    rng = np.random.default_rng(8)
    f = Fabric(workers=2, reliable_too=True)
    rc = f.contribution(0, 0, elements(rng), opcode=RC_WRITE_ONLY)
    assert f.send(rc) == [(1, rc)] and f.switch.counters["passthrough_opcode"] == 1
    assert f.send(f.contribution(0, 0, elements(rng), header=AggHeader(JOB + 1, 0, 8))) == []
    assert f.send(f.contribution(0, 0, elements(rng), header=AggHeader(JOB, 0, 8, dtype="bf16"))) == []
    assert f.switch.counters["drop_bad_header"] == 2
    assert f.send(f.contribution(0, 0, elements(rng, 13))) == []            # 68 bytes > mtu 64
    f.send(f.contribution(0, 0, elements(rng, 8)))
    assert f.send(f.contribution(1, 0, elements(rng, 4))) == []             # not the slot's length
    assert f.switch.counters["drop_bad_length"] == 2 and f.switch.counters["aggregated"] == 1
    # a UC WRITE ONLY with immediate on a reliable connection is not aggregated either (rule 7)
    uc = f.contribution(0, 0, elements(rng), job=JOB + 1)
    assert f.send(uc) == [(1, uc)] and f.switch.counters["passthrough_opcode"] == 2


# --- result requests ---------------------------------------------------------------------------------------

def test_result_request_is_answered_from_the_slot_to_the_receiver_only():
    rng = np.random.default_rng(9)
    f = Fabric(workers=3)
    v = [elements(rng) for _ in range(3)]
    f.send(f.contribution(1, 0, v[1]), now=0)
    assert f.send(f.request(2, 0)) == []            # open: its results go out at completion
    f.send(f.contribution(2, 0, v[2]))
    f.switch.advance(DEADLINE)
    out = f.send(f.request(2, 0), port=3)           # from worker 2's receiver, on any port
    assert len(out) == 1 and out[0][0] == 0         # to host 0, worker 2's responder
    check_result(f, out[0][1], 2, 0, 0b110, v, 1, template=1)      # the next PSN on the connection
    assert f.counters("result_requests", "results_resent", "result_requests_stale") == {
        "result_requests": 2, "results_resent": 1, "result_requests_stale": 0}


def test_result_request_opens_a_message_of_the_window_and_is_stale_once_the_slot_is_reused():
    rng = np.random.default_rng(10)
    f = Fabric(workers=2)
    assert f.send(f.request(0, 0), now=5) == []     # every packet of message 0 was lost: it opens now
    assert f.switch.next_deadline == 5 + DEADLINE
    out = f.switch.advance(5 + DEADLINE)
    assert results(out) == [] and len(credits(out)) == 2    # nothing to send, but the window moves
    assert f.switch.counters["contributors_0"] == 1 and f.switch.contributors == {0: 1}
    assert f.send(f.request(0, 0)) == []            # completed with nobody: nothing, not stale
    assert f.send(f.request(0, 3)) == []            # ahead of the window (1, 2)
    for seq in (1, 2, 3, 4):
        for w in range(2):
            f.send(f.contribution(w, seq, elements(rng)))
    assert len(f.send(f.request(1, 1))) == 1         # still held
    assert f.send(f.request(1, 0)) == []            # message 4 took the slot
    assert f.counters("result_requests", "results_resent", "result_requests_stale") == {
        "result_requests": 5, "results_resent": 1, "result_requests_stale": 2}


def test_a_receiver_has_a_result_again_at_most_result_resends_times_per_message():
    rng = np.random.default_rng(12)
    f = Fabric(workers=2)
    v = [elements(rng) for _ in range(2)]
    f.send(f.contribution(0, 0, v[0]))
    assert len(results(f.send(f.contribution(1, 0, v[1])))) == 2     # complete: each receiver's result
    for n in range(1, RESULT_RESENDS + 1):      # each on the connection's next PSN
        out = f.send(f.request(1, 0))
        assert len(out) == 1
        check_result(f, out[0][1], 1, 0, 0b11, v, n, template=0)
    sent = f.counters("results_sent", "results_resent")
    assert f.send(f.request(1, 0)) == [] and f.send(f.request(1, 0), port=2) == []     # refused, from anywhere
    assert f.counters("results_sent", "results_resent", "result_requests_refused") == {
        **sent, "result_requests_refused": 2}
    # the other receiver's resends are its own
    assert len(f.send(f.request(0, 0))) == 1
    # a message that takes the slot again starts from none
    for seq in (1, 2, 3, 4):
        for w in range(2):
            f.send(f.contribution(w, seq, elements(rng)))
    assert f.send(f.request(1, 0)) == [] and f.switch.counters["result_requests_stale"] == 1
    assert all(len(f.send(f.request(1, 4))) == 1 for _ in range(RESULT_RESENDS))
    assert f.send(f.request(1, 4)) == [] and f.switch.counters["result_requests_refused"] == 3


def test_requests_only_from_their_bound_place():
    f = Fabric(workers=2, vlan=5, reliable_too=True)
    counters = dict(f.switch.counters)
    forged = [
        f.request(0, 0, src=0),                                             # the requester, not the receiver
        build_control_frame(ControlMessage(ControlType.RESULT_REQUEST, JOB, 0, 0), src_mac=0x02BAD0000001,
                            dst_mac=SWITCH_MAC, src_ip=host_ip(1), dst_ip=SWITCH_IP),   # another MAC
        f.request(0, 0),                                                    # untagged
        f.request(2, 0),                                                    # no such worker
        f.request(0, 0, job=JOB + 1),                                       # a reliable job
    ]
    for frame in forged:
        assert f.send(frame) == []
    assert f.switch.counters["drop_control"] - counters["drop_control"] == 5
    assert f.switch.counters["result_requests"] == 0
    # a CREDIT_REQUEST of the lossy job from its requester, on any port: answered with W = K/2
    credit = build_control_frame(ControlMessage(ControlType.CREDIT_REQUEST, JOB, 1, 0), src_mac=host_mac(1),
                                 dst_mac=SWITCH_MAC, src_ip=host_ip(1), dst_ip=SWITCH_IP)
    tagged = credit[:12] + b"\x81\x00\x00\x05" + credit[12:]
    out = f.send(tagged, port=3)
    assert [(m.type, m.value) for m in credits(out)] == [(ControlType.CREDIT, 1)]


# --- binding ------------------------------------------------------------------------------------------------

ATTACKER_MAC, ATTACKER_IP = 0x02BAD0000001, "10.0.66.1"
BINDING_FAULTS = {
    "source MAC": {"eth_src": ATTACKER_MAC},
    "untagged": {"vlan": None},
    "other VLAN": {"vlan": 6},
    "destination MAC": {"eth_dst": ATTACKER_MAC},
    "destination IP": {"dst_ip": ATTACKER_IP},
}


def slot_state(model):
    return [(s.state, s.seq, s.bitmap, s.length) for s in model.jobs[JOB].slots], model.jobs[JOB].oldest


@pytest.mark.parametrize("fault", BINDING_FAULTS)
def test_contributions_not_bound_change_nothing(fault):
    rng = np.random.default_rng(11)
    f = Fabric(workers=2, vlan=5)
    v = [elements(rng) for _ in range(2)]
    before, counters = slot_state(f.switch), dict(f.switch.counters)
    assert f.send(f.contribution(0, 0, np.full(8, 1e30, np.float32), **BINDING_FAULTS[fault])) == []
    assert slot_state(f.switch) == before
    assert {k: f.switch.counters[k] - counters[k] for k in counters if f.switch.counters[k] != counters[k]} == {
        "frames_in": 1, "drop_spoofed": 1}
    f.send(f.contribution(0, 0, v[0]), port=3)
    out = f.send(f.contribution(1, 0, v[1]), port=2)
    assert [payload_of(frame)[16:] for _, frame in results(out)] == [masked_sum(v, 0b11).tobytes()] * 2


def test_the_port_is_not_part_of_the_binding():
    """MLT sprays packets over every path: a bound contribution counts on any port; the price is that a
    forger of all three source fields is the worker from anywhere (the contract's trust paragraph)."""
    rng = np.random.default_rng(12)
    f = Fabric(workers=2, ports=4)
    for port in range(4):
        f.send(f.contribution(0, port % 2, elements(rng)), port=port)
    assert f.switch.counters["aggregated"] == 2 and f.switch.counters["duplicates_dropped"] == 2
    assert f.switch.counters["drop_spoofed"] == 0


# --- configuration and the reliable class --------------------------------------------------------------------

def test_configuration_errors():
    with pytest.raises(ValueError, match="deadline_clocks"):
        JobConfig(job=1, workers=2, traffic_class="lossy")
    with pytest.raises(ValueError, match="deadline_clocks"):
        JobConfig(job=1, workers=2, deadline_clocks=10)
    with pytest.raises(ValueError, match="32 workers"):
        JobConfig(job=1, workers=33, traffic_class="lossy", deadline_clocks=10)
    with pytest.raises(ValueError, match="message_slots"):
        JobConfig(job=1, workers=2, message_slots=1, traffic_class="lossy", deadline_clocks=10)
    with pytest.raises(ValueError, match="traffic_class"):
        JobConfig(job=1, workers=2, traffic_class="best effort")
    with pytest.raises(ValueError, match="32-bit R_Key"):
        ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2", 2, responder_rkey=1 << 32)
    job = JobConfig(job=1, workers=1, traffic_class=JobClass.LOSSY, deadline_clocks=10)
    assert (job.window, job.packets_per_message) == (2, 1)
    with pytest.raises(ValueError, match="responder_rkey"):
        SwitchModel(SwitchConfig(jobs=[job], connections=[ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2",
                                                                            2)]))
    with pytest.raises(ValueError, match="no bounded-loss class"):
        SwitchConfig(jobs=[job], bounded_loss=False)
    assert SwitchConfig(jobs=[JobConfig(job=1, workers=1)], bounded_loss=False).jobs[0].lossy is False


def test_new_counters_are_in_the_register_map_and_stay_zero_for_the_reliable_class():
    assert set(NEW_COUNTERS) <= set(COUNTERS)
    f = Fabric(workers=2, reliable_too=True)
    rng = np.random.default_rng(13)
    for w in range(2):
        conn = f.conns[JOB + 1, w]
        frame = build_roce_frame(RC_WRITE_ONLY, AggHeader(JOB + 1, 0, 4).pack() + elements(rng, 4).tobytes(),
                                 eth_src=host_mac(w), eth_dst=conn.responder_mac, src_ip=conn.requester_ip,
                                 dst_ip=conn.responder_ip, dest_qp=conn.responder_qpn, psn=conn.start_psn,
                                 reth=(0, 0x77, 32))
        f.send(frame, port=w, now=10 * w)
    f.switch.advance(10**6)
    assert f.switch.counters["results_sent"] == 2
    assert all(f.switch.counters[name] == 0 for name in NEW_COUNTERS)
