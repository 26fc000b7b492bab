"""The golden model of the switch against the aggregation contract (docs/ARCHITECTURE.md, "Aggregation").

Frames are built with scapy (netreduce.host.packets), independently of the model's own deparser; expected
sums come from netreduce.sim.fp.tree_sum, which tests/test_fp_golden.py checks against exact arithmetic.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from netreduce.host.icrc import icrc_ok, ipv4_checksum
from netreduce.host.packets import build_ack, build_roce_frame, dissect
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame, parse_control_payload
from netreduce.sim.fp import tree_sum
from netreduce.sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig, SwitchModel
from netreduce.wire import ControlType

SWITCH_MAC, SWITCH_IP = 0x024E52000001, "10.0.255.1"
FIRST, MIDDLE, LAST, ONLY = 0x06, 0x07, 0x08, 0x0A


def host_mac(h):
    return 0x020000000001 + h


def host_ip(h):
    return f"10.0.0.{h + 1}"


class Fabric:
    """A switch model with ``workers`` workers per job on hosts 0..N-1 (worker w writes to host w+1), host h
    on port h mod ``ports``, every host in VLAN ``vlan`` (None: untagged). Frames are built bound to their
    connection unless fields say otherwise; :meth:`send` puts them on port 0 unless told."""

    def __init__(self, workers=2, jobs=1, ports=1, start_psn=100, vlan=None, **job_fields):
        job_fields.setdefault("mtu", 64)
        job_fields.setdefault("message_packets", 4)
        job_fields.setdefault("message_slots", 2)
        self.jobs = [JobConfig(job=j + 7, workers=workers, **job_fields) for j in range(jobs)]
        self.workers, self.ports, self.vlan = workers, ports, vlan
        self.conns = {}
        connections = []
        for j, job in enumerate(self.jobs):
            for w in range(workers):
                peer = (w + 1) % workers
                conn = ConnectionConfig(job.job, w, host_mac(w), host_ip(w), 0x100 + 16 * j + w,
                                        host_mac(peer), host_ip(peer), 0x200 + 16 * j + w,
                                        start_psn=(start_psn + 1000 * w) % (1 << 24), requester_port=w % ports,
                                        requester_vlan=vlan, responder_port=peer % ports, responder_vlan=vlan)
                self.conns[job.job, w] = conn
                connections.append(conn)
        self.config = SwitchConfig(mac=SWITCH_MAC, ip=SWITCH_IP, ports=ports,
                                   forwarding={host_mac(h): h % ports for h in range(workers)},
                                   jobs=self.jobs, connections=connections)
        self.switch = SwitchModel(self.config)

    def write(self, job, w, psn_offset, opcode, payload, **fields):
        conn = self.conns[job, w]
        values = {"eth_src": host_mac(w), "eth_dst": conn.responder_mac, "src_ip": conn.requester_ip,
                  "dst_ip": conn.responder_ip, "dest_qp": conn.responder_qpn, "vlan": self.vlan,
                  "psn": (conn.start_psn + psn_offset) % (1 << 24)}
        if opcode in (FIRST, ONLY):
            values["reth"] = (0x1000, 0x77, len(payload))
        values.update(fields)
        return build_roce_frame(opcode, payload, **values)

    def ack(self, job, w, psn_offset, syndrome=0, **fields):
        conn = self.conns[job, w]
        values = {"eth_src": conn.responder_mac, "eth_dst": conn.requester_mac, "src_ip": conn.responder_ip,
                  "dst_ip": conn.requester_ip, "dest_qp": conn.requester_qpn, "vlan": self.vlan}
        values.update(fields)
        return build_ack((conn.start_psn + psn_offset) % (1 << 24), 1, syndrome, **values)

    def send(self, frame, port=0):
        return self.switch.receive(port, frame)


def elements(rng, n):
    """Random finite binary32 values (as float32) of mixed magnitude."""
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32)


def first_payload(job, seq, values, count=None):
    header = AggHeader(job, seq, len(values) if count is None else count).pack()
    return header + values.astype("<f4").tobytes()


def sum_of(*values):
    bits = np.stack([v.astype("<f4").view("<u4") for v in values])
    return tree_sum("fp32", bits).astype("<u4").view("<f4")


def payload_of(frame):
    """The RoCE payload (scapy's dissection: Raw after the extension headers, before the ICRC)."""
    packet = dissect(frame)
    return bytes(packet["Raw"].load) if packet.haslayer("Raw") else b""


def test_single_packet_messages_are_summed_and_sent_to_every_receiver():
    rng = np.random.default_rng(1)
    f = Fabric(workers=3)
    v = [elements(rng, 8) for _ in range(3)]
    frames = [f.write(7, w, 0, ONLY, first_payload(7, 0, v[w])) for w in range(3)]
    assert f.send(frames[0]) == [] and f.send(frames[2]) == []
    out = f.send(frames[1])
    assert f.switch.counters["aggregated"] == 3 and f.switch.counters["results_sent"] == 3
    assert len(out) == 3
    expected = sum_of(*v).tobytes()
    for w, (port, frame) in enumerate(out):
        assert port == 0
        assert icrc_ok(frame)
        # worker w's own packet: same headers (addresses, QPN, PSN, RETH), own aggregation header
        sent, got = dissect(frames[w]), dissect(frame)
        for layer, name in (("Ether", "dst"), ("IP", "src"), ("IP", "dst"), ("BTH", "dqpn"), ("BTH", "psn"),
                            ("BTH", "opcode"), ("RETH", "va"), ("RETH", "rkey")):
            assert getattr(got[layer], name) == getattr(sent[layer], name)
        body = payload_of(frame)
        assert body[:16] == payload_of(frames[w])[:16]
        assert body[16:] == expected


def test_multi_packet_message_across_psn_wrap():
    rng = np.random.default_rng(2)
    f = Fabric(workers=2, start_psn=(1 << 24) - 2)
    chunks = [[elements(rng, 12), elements(rng, 16), elements(rng, 16), elements(rng, 4)] for _ in range(2)]
    opcodes = [FIRST, MIDDLE, MIDDLE, LAST]
    results = []
    for i, opcode in enumerate(opcodes):
        for w in range(2):
            payload = (first_payload(7, 0, chunks[w][0], 48) if i == 0
                       else chunks[w][i].astype("<f4").tobytes())
            results += f.send(f.write(7, w, i, opcode, payload))
    assert len(results) == 8 and f.switch.counters["aggregated"] == 8
    for i in range(4):
        for w in range(2):
            frame = results[2 * i + w][1]
            assert dissect(frame)["BTH"].psn == (f.conns[7, w].start_psn + i) % (1 << 24)
            body = payload_of(frame)
            assert body[16 if i == 0 else 0:] == sum_of(chunks[0][i], chunks[1][i]).tobytes()


def test_gap_passes_through_out_of_reach_and_the_retransmission_then_contributes():
    rng = np.random.default_rng(3)
    f = Fabric(workers=2)
    v = [elements(rng, 12) for _ in range(2)]
    tail = elements(rng, 4).tobytes()
    second = f.write(7, 0, 1, LAST, tail)
    out = f.send(second)
    # PSN ahead: it goes on to the responder, which NAKs it, with its PSN 2^22 further ahead so that a
    # late copy can never be taken in sequence; everything else is the same and the ICRC is right
    assert len(out) == 1 and out[0][0] == 0
    shifted = f.write(7, 0, 1 + (1 << 22), LAST, tail)
    assert out[0][1] == shifted and icrc_ok(shifted)
    assert f.switch.counters["passthrough_gap"] == 1 and f.switch.counters["aggregated"] == 0
    assert f.send(f.write(7, 0, 0, FIRST, first_payload(7, 0, v[0], 16))) == []
    assert f.switch.counters["aggregated"] == 1


def test_duplicates_dropped_before_the_sum_answered_after_it_stale_after_release():
    rng = np.random.default_rng(4)
    f = Fabric(workers=2)
    v = [elements(rng, 4) for _ in range(2)]
    w0 = f.write(7, 0, 0, ONLY, first_payload(7, 0, v[0]))
    f.send(w0)
    assert f.send(w0) == []
    assert f.switch.counters["duplicates_dropped"] == 1 and f.switch.counters["aggregated"] == 1
    out = f.send(f.write(7, 1, 0, ONLY, first_payload(7, 0, v[1])))
    assert len(out) == 2
    retransmission = f.write(7, 0, 0, ONLY, first_payload(7, 0, v[0]), ack_req=1)
    again = f.send(retransmission)
    assert len(again) == 1 and f.switch.counters["duplicates_answered"] == 1
    assert payload_of(again[0][1])[16:] == sum_of(*v).tobytes()
    assert dissect(again[0][1])["BTH"].ackreq == 1            # the duplicate's own header
    # both receivers ACK: the message is released, credits go out, and the PSN is stale from now on
    f.send(f.ack(7, 0, 0))
    out = f.send(f.ack(7, 1, 0))
    credits = [frame for _, frame in out if parse_control_payload(payload_of_udp(frame))]
    assert len(credits) == 2 and f.switch.counters["credits_sent"] == 2
    assert f.send(w0) == [(0, w0)] and f.switch.counters["passthrough_stale"] == 1


def payload_of_udp(frame):
    packet = dissect(frame)
    return bytes(packet["UDP"].payload)[:12] if packet.haslayer("UDP") else b""


def test_release_needs_every_receiver_and_credits_carry_the_window():
    rng = np.random.default_rng(5)
    f = Fabric(workers=2, message_slots=2)
    for seq in range(2):
        for w in range(2):
            f.send(f.write(7, w, seq, ONLY, first_payload(7, seq, elements(rng, 4))))
    # message 2 would reuse slot 0, still held: no credit
    early = f.write(7, 0, 2, ONLY, first_payload(7, 2, elements(rng, 4)))
    assert f.send(early) == [] and f.switch.counters["drop_no_credit"] == 1
    assert [x for x in f.send(f.ack(7, 0, 1)) if x[1] != f.ack(7, 0, 1)] == []   # one receiver is not enough
    out = f.send(f.ack(7, 1, 0))
    # worker 1 acked message 0 only; worker 0 both: message 0 released, window now 1..2
    values = [parse_control_payload(payload_of_udp(frame)) for _, frame in out[1:]]
    assert [(m.type, m.job, m.worker, m.value) for m in values] == [
        (ControlType.CREDIT, 7, 0, 2), (ControlType.CREDIT, 7, 1, 2)]
    assert f.send(early) == [] and f.switch.counters["aggregated"] == 5


def test_sequence_error_nak_counts_as_delivery_of_the_packets_before_it():
    rng = np.random.default_rng(6)
    f = Fabric(workers=2, message_slots=1)
    for w in range(2):
        f.send(f.write(7, w, 0, ONLY, first_payload(7, 0, elements(rng, 4))))
    f.send(f.ack(7, 0, 0))
    out = f.send(f.ack(7, 1, 1, syndrome=0x60))      # NAK: expected PSN 1, so PSN 0 arrived
    assert f.switch.counters["credits_sent"] == 2 and len(out) == 3


def test_bad_frames_are_dropped_and_counted():
    rng = np.random.default_rng(7)
    f = Fabric(workers=2)
    good = f.write(7, 0, 0, ONLY, first_payload(7, 0, elements(rng, 4)))
    bad_icrc = bytearray(good)
    bad_icrc[-5] ^= 1                                  # a payload bit (frame is not padded)
    assert f.send(bytes(bad_icrc)) == [] and f.switch.counters["drop_bad_icrc"] == 1
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, elements(rng, 4)), ipv4_csum=0x1234)) == []
    assert f.switch.counters["drop_bad_checksum"] == 1
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(8, 0, elements(rng, 4)))) == []   # wrong job
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 1, elements(rng, 4)))) == []   # wrong message
    assert f.send(f.write(7, 0, 0, ONLY, b"\x00" * 16 + elements(rng, 4).tobytes())) == []  # no magic
    assert f.switch.counters["drop_bad_header"] == 3
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, elements(rng, 13)))) == []  # > mtu 64
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, elements(rng, 4))[:-2])) == []  # pad 2
    assert f.switch.counters["drop_bad_length"] == 2
    assert f.switch.counters["aggregated"] == 0
    # the connection's state did not move: the good packet still contributes
    assert f.send(good) == [] and f.switch.counters["aggregated"] == 1
    other = f.write(7, 1, 0, ONLY, first_payload(7, 0, elements(rng, 5)))   # length differs from w0's
    assert f.send(other) == [] and f.switch.counters["drop_bad_length"] == 3


def test_opcode_out_of_message_order_passes_through():
    f = Fabric(workers=2)
    middle = f.write(7, 0, 0, MIDDLE, bytes(8))
    assert f.send(middle) == [(0, middle)] and f.switch.counters["passthrough_sequence"] == 1
    send_only = f.write(7, 0, 0, 0x04, bytes(8))                    # RC SEND ONLY: not aggregated
    assert f.send(send_only) == [(0, send_only)] and f.switch.counters["passthrough_opcode"] == 1


def test_unregistered_and_non_roce_traffic_is_forwarded_unchanged():
    f = Fabric(workers=2, ports=2)
    stranger = build_roce_frame(ONLY, first_payload(7, 0, np.ones(4, np.float32)), reth=(0, 0, 32),
                                eth_dst=host_mac(1), src_ip="10.9.9.9", dst_ip=host_ip(1), dest_qp=0x200)
    assert f.send(stranger) == [(1, stranger)]
    arp_like = host_mac(0).to_bytes(6, "big") + bytes(6) + b"\x08\x06" + bytes(46)
    assert f.send(arp_like, port=1) == [(0, arp_like)]
    ipv6 = build_roce_frame(ONLY, bytes(32), reth=(0, 0, 32), ipv6=True, eth_dst=host_mac(1), dest_qp=0x200)
    assert f.send(ipv6) == [(1, ipv6)]
    assert f.switch.counters["forwarded"] == 3 and f.switch.counters["aggregated"] == 0


def test_acks_are_forwarded_unchanged():
    f = Fabric(workers=2)
    ack = f.ack(7, 0, 5)
    assert f.send(ack) == [(0, ack)] and f.switch.counters["acks_seen"] == 1


def test_credit_request_is_answered_only_for_the_workers_own_address():
    f = Fabric(workers=2)
    request = ControlMessage(ControlType.CREDIT_REQUEST, 7, 1)
    good = build_control_frame(request, src_mac=host_mac(1), dst_mac=SWITCH_MAC, src_ip=host_ip(1),
                               dst_ip=SWITCH_IP)
    out = f.send(good)
    assert len(out) == 1
    reply = dissect(out[0][1])
    assert reply["IP"].dst == host_ip(1) and reply["Ether"].dst == "02:00:00:00:00:02"
    assert parse_control_payload(payload_of_udp(out[0][1])) == ControlMessage(ControlType.CREDIT, 7, 1, 1)
    spoofed = build_control_frame(request, src_mac=host_mac(0), dst_mac=SWITCH_MAC, src_ip=host_ip(0),
                                  dst_ip=SWITCH_IP)
    assert f.send(spoofed) == [] and f.switch.counters["drop_control"] == 1


def test_two_jobs_do_not_mix():
    rng = np.random.default_rng(8)
    f = Fabric(workers=2, jobs=2)
    v = {(j, w): elements(rng, 4) for j in (7, 8) for w in range(2)}
    out = []
    for w in range(2):
        for j in (7, 8):
            out += f.send(f.write(j, w, 0, ONLY, first_payload(j, 0, v[j, w])))
    assert len(out) == 4
    for _, frame in out:
        job = AggHeader.unpack(payload_of(frame)).job
        assert payload_of(frame)[16:] == sum_of(v[job, 0], v[job, 1]).tobytes()


def test_configuration_errors_are_reported():
    with pytest.raises(ValueError, match="no connection"):
        SwitchModel(SwitchConfig(jobs=[JobConfig(job=1, workers=2)], connections=[]))
    with pytest.raises(ValueError, match="floating-point format"):
        JobConfig(job=1, workers=2, dtype="fp64")
    with pytest.raises(ValueError, match="port"):
        SwitchConfig(ports=1, forwarding={1: 3})


def test_forwarded_roce_frames_leave_through_the_deparser():
    # same bytes up to the IP end; Ethernet padding (here not zero) becomes zero padding
    f = Fabric(workers=2)
    ack = f.ack(7, 0, 5)
    assert len(ack) == 62
    short = build_roce_frame(0x04, b"", eth_pad=False, dest_qp=0x999)     # RC SEND ONLY, unregistered
    assert len(short) == 58
    padded = short + b"\xaa\xbb"
    assert f.send(padded) == [(0, short + bytes(2))]
    trailing = ack + b"\x01\x02\x03"
    assert f.send(trailing) == [(0, ack)]


# --- the trust boundary (docs/ARCHITECTURE.md, "Switch behaviour" rules 2, 3, 5, 6; "Trust model") -------

ATTACKER_MAC, ATTACKER_IP = 0x02BAD0000001, "10.0.66.1"


def state_of(model):
    """Everything the switch keeps per connection and per job, to see that a frame changed none of it."""
    connections = {(job_id, c.worker): (c.expected, c.delivered, c.sent, c.next_seq, c.slot)
                   for job_id, job in model.jobs.items() for c in job.connections}
    jobs = {job_id: (job.oldest, [(s.busy, s.seq, tuple(s.first_psn), tuple(s.count),
                                   [(p.bitmap, p.length, p.sum) for p in s.packets]) for s in job.slots])
            for job_id, job in model.jobs.items()}
    return connections, jobs


def changed(before, after):
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def control_frame(message, *, src_mac, src_ip, dst_mac=SWITCH_MAC, dst_ip=SWITCH_IP, vlan=None, udp_payload=12):
    """A control packet as :func:`build_control_frame` builds it, optionally tagged, with the UDP length
    (and the IPv4 total length) covering only ``udp_payload`` bytes of the 12-byte message: the rest stays
    in the frame, after the IP end, where Ethernet padding is."""
    frame = bytearray(build_control_frame(message, src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip,
                                          dst_ip=dst_ip))
    frame[16:18] = (28 + udp_payload).to_bytes(2, "big")
    frame[24:26] = bytes(2)
    frame[24:26] = ipv4_checksum(frame[14:34]).to_bytes(2, "big")
    frame[38:40] = (8 + udp_payload).to_bytes(2, "big")
    if vlan is not None:
        frame[12:12] = b"\x81\x00" + vlan.to_bytes(2, "big")
    return bytes(frame)


def test_trust_configuration_errors_are_reported():
    with pytest.raises(ValueError, match="power of two"):
        JobConfig(job=1, workers=2, message_slots=3)
    with pytest.raises(ValueError, match="32 bits"):
        JobConfig(job=1, workers=2, start_msg=1 << 32)
    with pytest.raises(ValueError, match="32 bits"):
        JobConfig(job=1, workers=2, start_msg=-1)
    with pytest.raises(ValueError, match="VLAN"):
        ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2", 2, requester_vlan=4096)
    with pytest.raises(ValueError, match="VLAN"):
        ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2", 2, responder_vlan=-1)
    for side in ("requester_port", "responder_port"):
        conn = ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2", 2, **{side: 2})
        with pytest.raises(ValueError, match=side):
            SwitchConfig(ports=2, jobs=[JobConfig(job=1, workers=1)], connections=[conn])
    # positional construction keeps start_psn in its place
    assert ConnectionConfig(1, 0, 1, "10.0.0.1", 1, 2, "10.0.0.2", 2, 77).start_psn == 77


def test_frames_in_the_switchs_name_are_dropped_as_spoofed():
    f = Fabric(workers=2)
    credit = ControlMessage(ControlType.CREDIT, 7, 0, 1 << 20)
    forged = [
        build_control_frame(credit, src_mac=SWITCH_MAC, dst_mac=host_mac(0), src_ip=SWITCH_IP, dst_ip=host_ip(0)),
        build_control_frame(credit, src_mac=ATTACKER_MAC, dst_mac=host_mac(0), src_ip=SWITCH_IP,
                            dst_ip=host_ip(0)),
        build_control_frame(credit, src_mac=SWITCH_MAC, dst_mac=host_mac(0), src_ip=ATTACKER_IP,
                            dst_ip=host_ip(0)),
        host_mac(0).to_bytes(6, "big") + SWITCH_MAC.to_bytes(6, "big") + b"\x08\x06" + bytes(46),   # not IP
        build_roce_frame(0x04, bytes(8), eth_dst=host_mac(1), eth_src=ATTACKER_MAC, src_ip=SWITCH_IP,
                         dst_ip=host_ip(1), dest_qp=0x999),                              # unregistered RoCE
    ]
    for frame in forged:
        assert f.send(frame) == []
    assert changed({}, f.switch.counters) == {"frames_in": 5, "drop_spoofed": 5}
    # the checks of rule 1 come first
    bad = bytearray(forged[4])
    bad[-5] ^= 1
    assert f.send(bytes(bad)) == [] and f.switch.counters["drop_bad_icrc"] == 1
    f.switch.config.max_frame = 100
    assert f.send(forged[3] + bytes(100)) == [] and f.switch.counters["drop_oversize"] == 1
    assert f.switch.counters["drop_spoofed"] == 5


def test_control_packets_are_never_forwarded():
    f = Fabric(workers=2)
    before = dict(f.switch.counters)
    credit = ControlMessage(ControlType.CREDIT, 7, 1, 1 << 20)
    request = ControlMessage(ControlType.CREDIT_REQUEST, 7, 1)
    for frame in (
            build_control_frame(credit, src_mac=ATTACKER_MAC, dst_mac=host_mac(1), src_ip=ATTACKER_IP,
                                dst_ip=host_ip(1)),
            build_control_frame(request, src_mac=host_mac(1), dst_mac=host_mac(0), src_ip=host_ip(1),
                                dst_ip=host_ip(0)),
            build_control_frame(credit, src_mac=host_mac(0), dst_mac=SWITCH_MAC, src_ip=host_ip(0),
                                dst_ip=SWITCH_IP),           # a CREDIT to the switch is not a request
            build_control_frame(ControlMessage(ControlType.CREDIT_REQUEST, 9, 0), src_mac=host_mac(0),
                                dst_mac=SWITCH_MAC, src_ip=host_ip(0), dst_ip=SWITCH_IP),    # no such job
            build_control_frame(ControlMessage(ControlType.CREDIT_REQUEST, 7, 2), src_mac=host_mac(0),
                                dst_mac=SWITCH_MAC, src_ip=host_ip(0), dst_ip=SWITCH_IP)):   # no such worker
        assert f.send(frame) == []
    assert changed(before, f.switch.counters) == {"frames_in": 5, "drop_control": 5}


@pytest.mark.parametrize("udp_payload,answered", [(0, False), (8, False), (11, False), (12, True), (20, True)])
def test_credit_request_is_read_only_within_its_udp_length(udp_payload, answered):
    f = Fabric(workers=2)
    request = ControlMessage(ControlType.CREDIT_REQUEST, 7, 1)
    frame = control_frame(request, src_mac=host_mac(1), src_ip=host_ip(1), udp_payload=udp_payload)
    if udp_payload > 12:
        frame = frame[:54] + bytes(udp_payload - 12) + frame[54:]     # trailing bytes inside the UDP payload
    if udp_payload < 12:
        assert parse_control_payload(frame[42:54]) == request        # the whole message is in the frame
    out = f.send(frame)
    assert len(out) == answered
    assert f.switch.counters["credit_requests" if answered else "drop_control"] == 1


def test_credit_request_must_come_from_the_bound_requester():
    f = Fabric(workers=2, ports=2, vlan=5)
    request = ControlMessage(ControlType.CREDIT_REQUEST, 7, 1)

    def frame(**fields):
        values = {"src_mac": host_mac(1), "src_ip": host_ip(1), "vlan": 5}
        values.update(fields)
        return control_frame(request, **values)
    for bad, port in ((frame(), 0), (frame(src_mac=ATTACKER_MAC), 1), (frame(src_ip=host_ip(0)), 1),
                      (frame(vlan=None), 1), (frame(vlan=6), 1)):
        assert f.send(bad, port=port) == []
    assert f.switch.counters["drop_control"] == 5 and f.switch.counters["credits_sent"] == 0
    out = f.send(frame(vlan=0xE005), port=1)        # PCP 7, DEI 0: only the VLAN id is compared
    assert len(out) == 1 and out[0][0] == 1 and f.switch.counters["credit_requests"] == 1


BINDING_FAULTS = {
    "port": ({}, 1),
    "source MAC": ({"eth_src": ATTACKER_MAC}, 0),
    "untagged": ({"vlan": None}, 0),
    "other VLAN": ({"vlan": 6}, 0),
    "destination MAC": ({"eth_dst": ATTACKER_MAC}, 0),
    "destination IP": ({"dst_ip": ATTACKER_IP}, 0),
}


@pytest.mark.parametrize("fault", BINDING_FAULTS)
def test_contributions_not_bound_to_their_connection_change_nothing(fault):
    """Worker 0 (on port 0, VLAN 5) is spoofed with poison of another length, once in sequence and once as
    a retransmission after the sum exists; its own packets and worker 1's then give the true sum."""
    rng = np.random.default_rng(11)
    fields, port = BINDING_FAULTS[fault]
    f = Fabric(workers=2, ports=2, vlan=5)
    v = [elements(rng, 8) for _ in range(2)]
    poison = first_payload(7, 0, np.full(4, 1e30, np.float32))
    before, counters = state_of(f.switch), dict(f.switch.counters)
    assert f.send(f.write(7, 0, 0, ONLY, poison, **fields), port=port) == []
    assert state_of(f.switch) == before
    assert changed(counters, f.switch.counters) == {"frames_in": 1, "drop_spoofed": 1}
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, v[0]), vlan_pcp=1), port=0) == []
    out = f.send(f.write(7, 1, 0, ONLY, first_payload(7, 0, v[1])), port=1)
    assert [payload_of(frame)[16:] for _, frame in out] == [sum_of(*v).tobytes()] * 2
    before, counters = state_of(f.switch), dict(f.switch.counters)
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, v[0]), **fields), port=port) == []
    assert state_of(f.switch) == before
    assert changed(counters, f.switch.counters) == {"frames_in": 1, "drop_spoofed": 1}
    assert len(f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, v[0])), port=0)) == 1   # the real one


@pytest.mark.parametrize("fault", BINDING_FAULTS)
def test_acks_not_bound_to_their_connection_change_nothing(fault):
    """Both receivers of message 0 are "acknowledged" by frames off their binding: no release; their own
    ACKs then release it."""
    rng = np.random.default_rng(12)
    fields, port = BINDING_FAULTS[fault]
    f = Fabric(workers=2, ports=2, vlan=5, message_slots=1)
    for w in range(2):
        f.send(f.write(7, w, 0, ONLY, first_payload(7, 0, elements(rng, 4))), port=w)
    before, counters = state_of(f.switch), dict(f.switch.counters)
    # worker w's responder is host w + 1: ACKs of connection 0 arrive on port 1, of connection 1 on port 0
    for w in range(2):
        for syndrome, offset in ((0, 0), (0x60, 1)):
            assert f.send(f.ack(7, w, offset, syndrome, **fields), port=(w + 1 + port) % 2) == []
    assert state_of(f.switch) == before
    assert changed(counters, f.switch.counters) == {"frames_in": 4, "drop_spoofed": 4}
    f.send(f.ack(7, 0, 0), port=1)
    out = f.send(f.ack(7, 1, 0), port=0)
    assert f.switch.counters["credits_sent"] == 2 and len(out) == 3


def test_acks_move_delivered_only_up_to_the_newest_result_sent():
    rng = np.random.default_rng(13)
    f = Fabric(workers=2, message_slots=1, message_packets=2)
    v = [[elements(rng, 12), elements(rng, 4)] for _ in range(2)]
    f.send(f.write(7, 0, 0, FIRST, first_payload(7, 0, v[0][0], 16)))
    f.send(f.write(7, 0, 1, LAST, v[0][1].tobytes()))
    # worker 0's packets are in, no result has gone out: an ACK of them (from the bound responder) is ahead
    # of what the switch sent; it is forwarded and changes nothing
    before, counters = state_of(f.switch), dict(f.switch.counters)
    for ack in (f.ack(7, 0, 1), f.ack(7, 0, 0), f.ack(7, 0, 1, syndrome=0x60)):
        assert f.send(ack) == [(0, ack)]
    assert state_of(f.switch) == before
    assert changed(counters, f.switch.counters) == {"frames_in": 3, "frames_out": 3, "forwarded": 3,
                                                     "acks_seen": 3, "acks_ahead": 3}
    # a packet after a gap passes through and is no result either
    gap = f.write(7, 1, 1, LAST, v[1][1].tobytes())
    assert len(f.send(gap)) == 1 and f.switch.counters["passthrough_gap"] == 1
    f.send(f.ack(7, 1, 1))
    assert f.switch.counters["acks_ahead"] == 4
    # the first packet's results: sent is now each worker's first PSN; the ACKs of the last ones are ahead
    assert len(f.send(f.write(7, 1, 0, FIRST, first_payload(7, 0, v[1][0], 16)))) == 2
    f.send(f.ack(7, 0, 1))
    assert f.switch.counters["acks_ahead"] == 5
    f.send(f.ack(7, 0, 0))
    conn = f.switch.jobs[7].connections[0]
    assert conn.delivered == conn.sent == f.conns[7, 0].start_psn
    assert len(f.send(f.write(7, 1, 1, LAST, v[1][1].tobytes()))) == 2
    # behind delivered: nothing, not counted; a NAK of the PSN after the last result delivers through it
    f.send(f.ack(7, 0, 0))
    f.send(f.ack(7, 0, 2, syndrome=0x60))
    out = f.send(f.ack(7, 1, 1))
    assert f.switch.counters["acks_ahead"] == 5 and f.switch.counters["credits_sent"] == 2 and len(out) == 3


def test_message_numbers_wrap_modulo_2_32():
    rng = np.random.default_rng(14)
    f = Fabric(workers=2, message_slots=2, start_msg=(1 << 32) - 1)
    assert f.send(f.write(7, 0, 0, ONLY, first_payload(7, 0, elements(rng, 4)))) == []       # not the first
    assert f.switch.counters["drop_bad_header"] == 1
    for seq, offset in (((1 << 32) - 1, 0), (0, 1)):
        for w in range(2):
            f.send(f.write(7, w, offset, ONLY, first_payload(7, seq, elements(rng, 4))))
    assert f.switch.counters["results_sent"] == 4
    third = [f.write(7, w, 2, ONLY, first_payload(7, 1, elements(rng, 4))) for w in range(2)]
    assert f.send(third[0]) == [] and f.switch.counters["drop_no_credit"] == 1      # 1 - (2^32 - 1) = 2 >= K
    f.send(f.ack(7, 0, 0))
    out = f.send(f.ack(7, 1, 0))
    values = [parse_control_payload(payload_of_udp(frame)).value for _, frame in out[1:]]
    assert values == [1, 1]                                                    # 0 + K - 1
    assert f.send(third[0]) == [] and len(f.send(third[1])) == 2
    for w in range(2):
        f.send(f.ack(7, w, 2))
    assert f.switch.jobs[7].oldest == 2 and f.switch.counters["credits_sent"] == 6


@settings(max_examples=40, deadline=None)
@given(start=st.one_of(st.integers((1 << 32) - 20, (1 << 32) - 1), st.integers(0, (1 << 32) - 1)),
       slots=st.sampled_from([1, 2, 4, 8]))
def test_credit_window_is_continuous_across_2_32(start, slots):
    """One worker (writing to itself) sends K + 1 one-packet messages without waiting: K are summed, the
    next is beyond the window; each ACK releases one message and opens the window by one."""
    f = Fabric(workers=1, message_slots=slots, message_packets=1, start_msg=start)
    frames = [f.write(7, 0, i, ONLY, first_payload(7, (start + i) % (1 << 32), np.ones(2, np.float32)))
              for i in range(slots + 2)]
    for frame in frames[:slots]:
        assert len(f.send(frame)) == 1
    assert f.send(frames[slots]) == [] and f.switch.counters["drop_no_credit"] == 1
    out = f.send(f.ack(7, 0, 0))
    assert parse_control_payload(payload_of_udp(out[1][1])).value == (start + slots) % (1 << 32)
    assert len(f.send(frames[slots])) == 1
    assert f.send(frames[slots + 1]) == [] and f.switch.counters["drop_no_credit"] == 2


def test_without_ipv6_an_ipv6_roce_frame_goes_on_byte_for_byte():
    """``SwitchConfig(ipv6=False)``: an IPv6 RoCE frame is not RoCE to the switch. With a wrong ICRC and bytes
    past its IP packet it goes on unchanged and is counted forwarded; with IPv6 it is dropped (a wrong ICRC)
    or rebuilt (the bytes past the packet become no part of it)."""
    v6 = dict(ipv6=True, src_ip="fd00::1", dst_ip="fd00::2", eth_dst=0x02_00_00_00_0F_0F)
    bad = build_roce_frame(0x04, bytes(range(20)), psn=5, icrc=0xDEADBEEF, **v6)
    trailer = build_roce_frame(0x04, bytes(range(20)), psn=6, **v6) + bytes(range(1, 9))
    without = SwitchModel(SwitchConfig(ipv6=False))
    assert without.receive(0, bad) == [(0, bad)]
    assert without.receive(0, trailer) == [(0, trailer)]
    assert without.counters["forwarded"] == 2 and without.counters["drop_bad_icrc"] == 0
    with_ipv6 = SwitchModel(SwitchConfig())
    assert with_ipv6.receive(0, bad) == []
    assert with_ipv6.counters["drop_bad_icrc"] == 1
    assert with_ipv6.receive(0, trailer) == [(0, trailer[:-8])]
