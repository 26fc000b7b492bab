"""MLT classes (netreduce.host.classify) and what the host library puts on the wire for them: the default
map's rules, magnitude buckets as quantiles, layer groups of real models, the DSCP and the UDP source port
of the frames the RC endpoints build (read back with netreduce.sim.roce_model.parse_frame), and an
all-reduce through the golden model with them.

Expected values come from the rules in the issue and the module docstrings (front layers before back
ones, small magnitudes before large ones, quantiles balancing the buckets, Linux's source-port formula
worked by hand), not from the implementation's output.
"""

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from netreduce.host import workloads
from netreduce.host.classify import (
    RELIABLE,
    ClassMap,
    TrafficClass,
    classify_layers,
    elements_per_packet,
    layer_group,
    magnitude_bucket,
    magnitude_buckets,
    magnitude_edges,
    packet_magnitudes,
    split_layers,
)
from netreduce.host.network import ModelEngine, build_allreduce, expected_sum
from netreduce.host.packets import build_ack
from netreduce.host.rc import (
    Endpoint,
    Memory,
    RcRequester,
    RcResponder,
    SourcePort,
    flow_label,
    roce_udp_sport,
)
from netreduce.host.worker import HostAddress, Worker
from netreduce.sim.fp import from_float64, to_float64
from netreduce.sim.roce_model import parse_frame
from netreduce.sim.switch_model import JobConfig
from netreduce.wire import CONTROL_PORT

REQ = Endpoint(0x02_00_00_00_00_01, "10.0.0.1", 0x000A11, 0xC001)
RSP = Endpoint(0x02_00_00_00_00_02, "10.0.0.2", 0x000B22, 0xC002)
VA, RKEY = 0x10000, 0x1234
NAK_SEQ = 0x60
DEFAULT = ClassMap.default()


def header(frame):
    """What parse_frame reads in a frame, which must be a valid RoCE v2 one."""
    parsed = parse_frame(frame)
    assert parsed.header["roce"] and parsed.verdict["icrc_ok"] and parsed.verdict["ipv4_csum_ok"]
    return parsed.header


def bounded_loss_dscps(class_map):
    return [d for row in class_map.dscp for d in row]


# --- the default map ----------------------------------------------------------------------------------------

def test_default_map_is_the_documented_one():
    assert (DEFAULT.layer_groups, DEFAULT.magnitude_buckets, DEFAULT.reliable) == (4, 4, 26)
    for g in range(4):
        for b in range(4):
            assert DEFAULT.dscp_of(g, b) == 0b100000 | g << 2 | b
            assert DEFAULT.drop_level(g, b) == g + b
    assert ClassMap() == DEFAULT


def test_default_map_every_dscp_valid_and_the_reliable_class_distinct():
    dscps = bounded_loss_dscps(DEFAULT)
    assert all(0 < d < 64 for d in dscps + [DEFAULT.reliable])
    assert len(set(dscps)) == 16 and DEFAULT.reliable not in dscps
    # none on unmarked traffic's 0, nor on the DSCPs of CNPs (48) and network control (56)
    assert not {0, 48, 56} & set(dscps + [DEFAULT.reliable])
    assert DEFAULT.decode(DEFAULT.reliable) == RELIABLE == TrafficClass(True, None, None)
    assert DEFAULT.decode(0) is None


def test_default_map_drops_front_before_back_and_small_before_large():
    groups, buckets = DEFAULT.layer_groups, DEFAULT.magnitude_buckets
    for g in range(groups):
        for b in range(buckets):
            if g + 1 < groups:
                assert DEFAULT.drop_level(g, b) < DEFAULT.drop_level(g + 1, b)     # front dropped first
            if b + 1 < buckets:
                assert DEFAULT.drop_level(g, b) < DEFAULT.drop_level(g, b + 1)     # small dropped first
    assert DEFAULT.drop_level(0, 0) == 0
    assert DEFAULT.drop_level(groups - 1, buckets - 1) == max(max(row) for row in DEFAULT.drop_levels)


@pytest.mark.parametrize("class_map", [DEFAULT, ClassMap(2, 3, dscp=((8, 9, 10), (11, 12, 13)), reliable=0),
                                       ClassMap(1, 1, dscp=((63,),), reliable=62, drop_levels=((5,),))])
def test_decode_inverts_the_map_and_the_table_is_every_dscp(class_map):
    table = class_map.table()
    assert len(table) == 64
    for dscp in range(64):
        assert table[dscp] == class_map.decode(dscp)
    for g in range(class_map.layer_groups):
        for b in range(class_map.magnitude_buckets):
            assert class_map.decode(class_map.dscp_of(g, b)) == TrafficClass(False, g, b)
    assert table[class_map.reliable] == RELIABLE
    assert sum(entry is not None for entry in table) == class_map.layer_groups * class_map.magnitude_buckets + 1


@pytest.mark.parametrize("kwargs,message", [
    ({"layer_groups": 0}, "layer_groups must be a positive integer"),
    ({"magnitude_buckets": 2.5}, "magnitude_buckets must be a positive integer"),
    ({"reliable": 64}, "reliable class's DSCP must be in 0..63"),
    ({"reliable": 33}, "DSCP 33 is given to both the reliable class and class .group 0, bucket 1."),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((9, 9),)}, "DSCP 9 is given to both"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((9, 64),)}, "must be in 0..63, not 64"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((9, -1),)}, "must be in 0..63, not -1"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((0, 9),)}, "on DSCP 0: unmarked traffic"),
    ({"layer_groups": 2, "magnitude_buckets": 2, "dscp": ((9, 10),)}, "2 rows .layer groups. of 2 integers"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((9, 10, 11),)}, "not \\[3\\]"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": ((9, "10"),)}, "holds '10', not an integer"),
    ({"layer_groups": 1, "magnitude_buckets": 2, "dscp": 7}, "dscp must be 1 rows"),
    ({"layer_groups": 8, "magnitude_buckets": 8}, "must be in 0..63, not 64"),     # the default block is full
    ({"drop_levels": ((0, 1, 2, 3), (1, 2, 3, 4), (0, 3, 4, 5), (3, 4, 5, 6))},
     "below the one of group 1: a back layer would be dropped before a front one"),
    ({"drop_levels": ((0, 2, 1, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6))},
     "below the one of bucket 1: a large gradient would be dropped before a small one"),
    ({"drop_levels": ((-1, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6))}, "is negative"),
])
def test_class_map_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClassMap(**kwargs)


def test_equal_drop_levels_drop_classes_together_and_are_allowed():
    layer_only = ClassMap(drop_levels=[[g] * 4 for g in range(4)])
    assert layer_only.drop_level(2, 0) == layer_only.drop_level(2, 3) == 2
    assert layer_only.drop_levels == ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3))


def test_class_lookups_reject_what_is_not_a_class():
    with pytest.raises(ValueError, match="layer group 4 is not in 0..3"):
        DEFAULT.dscp_of(4, 0)
    with pytest.raises(ValueError, match="magnitude bucket -1 is not in 0..3"):
        DEFAULT.drop_level(0, -1)
    with pytest.raises(ValueError, match="a DSCP is in 0..63"):
        DEFAULT.decode(64)


# --- layer groups -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,first,last", [
    ("resnet50", "conv1.weight", "fc.bias"),
    ("bert-base", "embeddings.word_embeddings.weight", "pooler.dense.bias"),
])
@pytest.mark.parametrize("groups", [1, 3, 4, 8])
def test_layer_groups_of_real_models_put_front_layers_first(model, first, last, groups):
    layer_list = workloads.layers(model)
    count = len(layer_list)
    assigned = [layer_group(i, count, groups) for i in range(count)]
    names = [name for name, _ in layer_list]
    assert assigned[names.index(first)] == 0 and assigned[names.index(last)] == groups - 1
    assert assigned == sorted(assigned)                        # forward order: never back to a front group
    sizes = Counter(assigned)
    assert set(sizes) == set(range(groups))
    assert max(sizes.values()) - min(sizes.values()) <= 1      # L / G consecutive layers each, give or take one


def test_layer_groups_of_named_layers():
    resnet = [name for name, _ in workloads.layers("resnet50")]
    assert len(resnet) == 161
    group = {name: DEFAULT.group_of(i, len(resnet)) for i, name in enumerate(resnet)}
    assert group["layer1.0.conv1.weight"] == 0 and group["layer4.2.conv3.weight"] == 3
    bert = [name for name, _ in workloads.layers("bert-base")]
    group = {name: DEFAULT.group_of(i, len(bert)) for i, name in enumerate(bert)}
    assert group["encoder.layer.0.attention.self.query.weight"] == 0
    assert group["encoder.layer.11.output.dense.weight"] == 3
    with pytest.raises(ValueError, match="layer index 161 is not in 0..160"):
        DEFAULT.group_of(161, 161)


# --- magnitude buckets --------------------------------------------------------------------------------------

def random_tensor(seed, elements):
    """Normal values whose scale changes along the tensor, as gradients do."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, elements) * 2.0 ** rng.uniform(-8, 8, elements)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), elements=st.integers(1, 3000), packet=st.integers(1, 300),
       buckets=st.integers(1, 8))
def test_magnitude_buckets_grow_with_the_mean_absolute_value(seed, elements, packet, buckets):
    tensor = random_tensor(seed, elements)
    assigned = magnitude_buckets(tensor, packet, buckets)
    means = [np.mean(np.abs(tensor[i:i + packet])) for i in range(0, elements, packet)]
    assert len(assigned) == len(means) == -(-elements // packet)
    order = np.argsort(means, kind="stable")
    assert np.all(np.diff(assigned[order]) >= 0)
    assert assigned.min() >= 0 and assigned.max() < buckets


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), packets=st.integers(1, 400), packet=st.integers(1, 64),
       buckets=st.integers(1, 8))
def test_magnitude_buckets_are_balanced_on_random_tensors(seed, packets, packet, buckets):
    tensor = random_tensor(seed, packets * packet)
    counts = np.bincount(magnitude_buckets(tensor, packet, buckets), minlength=buckets)
    assert counts.sum() == packets and len(counts) == buckets
    assert counts.max() - counts.min() <= 1


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_one_packet_at_a_time_agrees_with_the_whole_tensor(dtype):
    bits = from_float64(dtype, random_tensor(3, 1000) * 1e-3)
    edges = magnitude_edges(bits, 37, 4, dtype=dtype)
    assert len(edges) == 3 and np.all(np.diff(edges) >= 0)
    one_by_one = [magnitude_bucket(bits[i:i + 37], edges, dtype=dtype) for i in range(0, 1000, 37)]
    assert one_by_one == list(magnitude_buckets(bits, 37, 4, dtype=dtype))


def test_bit_patterns_are_read_as_values():
    values = np.array([1.0, -2.0, 0.5, -0.25, 3.0, 0.0], dtype=np.float32)
    expected = [1.5, 0.375, 1.5]
    np.testing.assert_array_equal(packet_magnitudes(values, 2), expected)
    np.testing.assert_array_equal(packet_magnitudes(values.view(np.uint32), 2, dtype="fp32"), expected)
    with pytest.raises(ValueError, match="needs its element format"):
        packet_magnitudes(values.view(np.uint32), 2)


def test_ties_share_a_bucket_and_a_nan_counts_as_large():
    tensor = np.array([0.0] * 6 + [1.0, 2.0, np.nan, 3.0])      # the median is 0: zeros go below it
    assert list(magnitude_buckets(tensor, 1, 2)) == [0] * 6 + [1] * 4
    assert list(magnitude_buckets(np.full(8, 0.5), 2, 4)) == [0] * 4        # on every edge: below them
    assert magnitude_bucket([np.nan, 0.0], [1.0, 2.0, 3.0]) == 3
    with pytest.raises(ValueError, match="empty tensor"):
        magnitude_edges(np.zeros(0), 4, 4)


# --- a workload classified ----------------------------------------------------------------------------------

def test_resnet50_gradients_classified_packet_by_packet():
    layer_list = workloads.layers("resnet50")
    rng = np.random.default_rng(5)      # float32 gradients of per-layer scale (workloads.gradients is slow here)
    grads = np.concatenate([rng.standard_normal(size, dtype=np.float32) * np.float32(2.0 ** rng.uniform(-4, 4))
                            for _, size in layer_list])
    per_packet = elements_per_packet(1024, "fp32")
    assert per_packet == (1024 - 16) // 4
    classified = classify_layers(layer_list, split_layers(layer_list, grads), per_packet)
    assert [c.name for c in classified] == [name for name, _ in layer_list]
    for index, ((_, size), layer) in enumerate(zip(layer_list, classified, strict=True)):
        assert layer.index == index and layer.group == index * 4 // len(layer_list)
        assert len(layer.buckets) == len(layer.dscp) == -(-size // per_packet)
        assert list(layer.dscp) == [DEFAULT.dscp_of(layer.group, b) for b in layer.buckets]
        counts = np.bincount(layer.buckets, minlength=4)
        assert counts.max() - counts.min() <= 1
    fc = classified[-2]
    assert fc.name == "fc.weight" and set(fc.dscp) == {44, 45, 46, 47}
    with pytest.raises(ValueError, match="160 gradient tensors for 161 layers"):
        classify_layers(layer_list, split_layers(layer_list, grads)[1:], per_packet)


def test_bit_patterns_of_a_workload_are_classified_like_their_values():
    layer_list = workloads.synthetic([1000, 3000, 10, 7000])
    bits = workloads.gradients(layer_list, 1, "bf16", np.random.default_rng(6))[0]
    values = to_float64("bf16", bits)
    per_packet = elements_per_packet(256, "bf16")
    by_bits = classify_layers(layer_list, split_layers(layer_list, bits), per_packet, dtype="bf16")
    by_values = classify_layers(layer_list, split_layers(layer_list, values), per_packet)
    assert [c.group for c in by_bits] == [0, 1, 2, 3]
    for a, b in zip(by_bits, by_values, strict=True):
        np.testing.assert_array_equal(a.dscp, b.dscp)


# --- DSCP on the wire ---------------------------------------------------------------------------------------

def test_requester_frames_carry_the_reliable_dscp_and_a_work_requests_own():
    req = RcRequester(REQ, RSP, mtu=256, dscp=DEFAULT.reliable, max_outstanding=100)
    req.post_write(bytes(600), va=VA, rkey=RKEY)
    lossy = DEFAULT.dscp_of(0, 1)
    req.post_write(bytes(100), va=VA + 0x1000, rkey=RKEY, immediate=7, dscp=lossy)
    req.post_write(bytes(300), va=VA + 0x2000, rkey=RKEY)
    frames = [header(f) for f in req.poll(0)]
    assert [h["ip_dscp"] for h in frames] == [26, 26, 26, lossy, 26, 26]
    assert all(h["ip_ecn"] == 0 and h["udp_sport"] == REQ.udp_sport for h in frames)
    # a go-back-N resends each packet with the DSCP of its work request
    req.receive(build_ack(2, 0, NAK_SEQ, eth_src=RSP.mac, eth_dst=REQ.mac, src_ip=RSP.ip, dst_ip=REQ.ip,
                          dest_qp=REQ.qpn, sport=RSP.udp_sport), 10)
    resent = [header(f) for f in req.poll(10)]
    assert [(h["bth_psn"], h["ip_dscp"]) for h in resent] == [(2, 26), (3, lossy), (4, 26), (5, 26)]
    with pytest.raises(ValueError, match="dscp must be an integer in 0..63"):
        req.post_write(b"", va=VA, rkey=RKEY, dscp=64)


def test_the_dscp_is_a_setting_of_the_qp_and_the_default_stays_0():
    req = RcRequester(REQ, RSP)
    req.post_write(bytes(8), va=VA, rkey=RKEY)
    req.dscp = 40
    req.post_write(bytes(8), va=VA, rkey=RKEY)
    assert [header(f)["ip_dscp"] for f in req.poll(0)] == [40, 40]       # built when sent
    memory = Memory()
    memory.register(VA, 64, RKEY)
    rsp = RcResponder(RSP, REQ, memory=memory)
    assert rsp.dscp == 0
    rsp.dscp = DEFAULT.reliable
    other = RcRequester(REQ, RSP)
    other.post_write(bytes(8), va=VA, rkey=RKEY)
    acks = rsp.receive(other.poll(0)[0], 0)
    assert [header(f)["ip_dscp"] for f in acks] == [26]
    with pytest.raises(ValueError, match="dscp must be an integer in 0..63"):
        rsp.dscp = -1


def test_a_worker_with_a_class_map_sends_everything_in_the_reliable_class():
    job = JobConfig(job=1, workers=2, mtu=256, message_packets=2, message_slots=4)
    memory = Memory()
    memory.register(0x50_0000, 4 * 512, 0x77)
    requester = RcRequester(REQ, RSP, mtu=256)
    responder = RcResponder(Endpoint(0x02_00_00_00_00_01, "10.0.0.1", 0x000C33), RSP, memory=memory, mtu=256)
    host, switch = HostAddress(REQ.mac, REQ.ip), HostAddress(0x024E52000001, "10.0.255.1")
    worker = Worker(job, 0, np.arange(300, dtype=np.uint32), requester=requester, responder=responder,
                    memory=memory, send_va=0, send_rkey=1, recv_va=0x50_0000, host=host, switch=switch,
                    control_port=CONTROL_PORT, class_map=DEFAULT)
    assert worker.pump(0) == []
    frames = [header(f) for f in requester.poll(0)]
    assert len(frames) == 5 and {h["ip_dscp"] for h in frames} == {26}
    assert responder.dscp == 26
    plain = RcRequester(REQ, RSP)
    Worker(job, 0, np.arange(4, dtype=np.uint32), requester=plain, responder=RcResponder(RSP, REQ, memory=memory),
           memory=memory, send_va=0, send_rkey=1, recv_va=0x50_0000, host=host, switch=switch,
           control_port=CONTROL_PORT)
    assert plain.dscp == 0


# --- UDP source port ----------------------------------------------------------------------------------------

def test_linux_source_port_formula_worked_by_hand():
    # rdma_calc_flow_label: v = lqpn * rqpn; v ^= v >> 20; v ^= v >> 40; 20 bits.
    # rdma_flow_label_to_udp_sport: (low 14 bits ^ high 6 bits) | 0xC000.
    assert roce_udp_sport(0x11, 0x12) == 0xC000 | 0x132                 # 0x11 * 0x12 = 0x132, nothing folds
    assert roce_udp_sport(0x4000, 0x4) == 0xC000 | 4                     # 0x10000: bit 16 folds onto bit 2
    assert flow_label(0x100000, 1) == 1                                  # bit 20 folds onto bit 0
    assert roce_udp_sport(0x100000, 1) == 0xC001
    assert roce_udp_sport(REQ.qpn, RSP.qpn) == roce_udp_sport(RSP.qpn, REQ.qpn)     # symmetric


def test_fixed_source_port_is_the_default_and_as_before():
    req = RcRequester(REQ, RSP)
    assert req.source_port is SourcePort.FIXED
    req.post_write(bytes(3000), va=VA, rkey=RKEY)
    assert {header(f)["udp_sport"] for f in req.poll(0)} == {REQ.udp_sport}
    assert Endpoint(1, "10.0.0.9", 5).udp_sport == 0xC000


def test_per_qp_source_port_is_stable_for_a_qp_and_shared_by_its_acks():
    memory = Memory()
    memory.register(VA, 1 << 16, RKEY)
    req = RcRequester(REQ, RSP, mtu=256, source_port=SourcePort.PER_QP)
    rsp = RcResponder(RSP, REQ, memory=memory, mtu=256, source_port="per_qp")
    for i in range(4):
        req.post_write(bytes(1000), va=VA + 0x1000 * i, rkey=RKEY)
    frames = req.poll(0)
    acks = [a for f in frames for a in rsp.receive(f, 0)]
    port = roce_udp_sport(REQ.qpn, RSP.qpn)
    assert 0xC000 <= port <= 0xFFFF and port not in (REQ.udp_sport, RSP.udp_sport)
    assert {header(f)["udp_sport"] for f in frames + acks} == {port}
    assert len(frames) == 16 and len(acks) == 4
    assert len(rsp.completions) == 4


def test_per_qp_source_ports_spread_across_queue_pairs():
    rng = np.random.default_rng(9)
    pairs = {(int(a), int(b)) for a, b in rng.integers(1, 1 << 24, (512, 2))}
    ports = [roce_udp_sport(a, b) for a, b in pairs]
    assert all(0xC000 <= p <= 0xFFFF for p in ports)
    assert len(set(ports)) >= 0.95 * len(ports)
    sixteenths = Counter((p - 0xC000) >> 10 for p in ports)
    assert set(sixteenths) == set(range(16)) and max(sixteenths.values()) < 3 * len(ports) / 16
    # consecutive QPNs, as a NIC hands them out (build_allreduce's 0x100, 0x101, ...)
    sequential = {roce_udp_sport(0x100 + 2 * k, 0x101 + 2 * k) for k in range(256)}
    assert len(sequential) >= 240


def test_per_packet_source_port_varies_and_is_kept_by_a_retransmission():
    req = RcRequester(REQ, RSP, mtu=64, max_outstanding=1000, source_port=SourcePort.PER_PACKET)
    req.post_write(bytes(64 * 512), va=VA, rkey=RKEY)
    frames = [header(f) for f in req.poll(0)]
    ports = [h["udp_sport"] for h in frames]
    assert ports == [roce_udp_sport(REQ.qpn, RSP.qpn, psn) for psn in range(512)]
    assert all(0xC000 <= p <= 0xFFFF for p in ports)
    assert len(set(ports)) >= 0.9 * len(ports)
    assert all(a != b for a, b in zip(ports, ports[1:], strict=False))
    assert Counter((p - 0xC000) >> 12 for p in ports).most_common(1)[0][1] < 0.4 * len(ports)
    req.receive(build_ack(100, 0, NAK_SEQ, eth_src=RSP.mac, eth_dst=REQ.mac, src_ip=RSP.ip, dst_ip=REQ.ip,
                          dest_qp=REQ.qpn, sport=RSP.udp_sport), 10)
    resent = [header(f)["udp_sport"] for f in req.poll(10)]
    assert resent == ports[100:]


def test_source_port_rule_must_be_known():
    with pytest.raises(ValueError, match="is not a valid SourcePort"):
        RcRequester(REQ, RSP, source_port="random")


# --- through the golden model -------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", [SourcePort.PER_QP, SourcePort.PER_PACKET])
def test_allreduce_in_the_reliable_class_with_entropy(rule):
    network, jobs, inputs = build_allreduce(workers=3, nbytes=6_000, mtu=256, seed=12,
                                            engine=lambda config: ModelEngine(config, record=True),
                                            class_map=replace(DEFAULT, reliable=10), source_port=rule)
    assert network.run(time_limit_ns=10**9) == "done"
    for worker in network.workers:
        np.testing.assert_array_equal(worker.result, expected_sum(jobs[0], inputs[0]))
    engine = network.engine
    into = [header(frame) for _, frame in engine.inputs if parse_frame(frame).header["roce"]]
    out = [header(frame) for produced in engine.outputs for _, frame in produced
           if parse_frame(frame).header["roce"]]
    assert into and out and {h["ip_dscp"] for h in into + out} == {10}
    qp_ports = {roce_udp_sport(w.requester.local.qpn, w.requester.remote.qpn) for w in network.workers}
    ports = {h["udp_sport"] for h in into + out}
    if rule is SourcePort.PER_QP:
        assert ports == qp_ports
    else:
        assert len(ports) > 3 * len(qp_ports)
