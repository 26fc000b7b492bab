"""The golden model of the switch against the aggregation contract (docs/ARCHITECTURE.md, "Aggregation").

Frames are built with scapy (netreduce.host.packets), independently of the model's own deparser; expected
sums come from netreduce.sim.fp.tree_sum, which tests/test_fp_golden.py checks against exact arithmetic.
"""

import numpy as np
import pytest

from netreduce.host.icrc import icrc_ok
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
    """A switch model with ``workers`` workers per job on hosts 0..N-1 (worker w writes to host w+1)."""

    def __init__(self, workers=2, jobs=1, ports=1, start_psn=100, **job_fields):
        job_fields.setdefault("mtu", 64)
        job_fields.setdefault("message_packets", 4)
        job_fields.setdefault("message_slots", 2)
        self.jobs = [JobConfig(job=j + 7, workers=workers, **job_fields) for j in range(jobs)]
        self.workers = workers
        self.conns = {}
        connections = []
        for j, job in enumerate(self.jobs):
            for w in range(workers):
                peer = (w + 1) % workers
                conn = ConnectionConfig(job.job, w, host_mac(w), host_ip(w), 0x100 + 16 * j + w,
                                        host_mac(peer), host_ip(peer), 0x200 + 16 * j + w,
                                        start_psn=(start_psn + 1000 * w) % (1 << 24))
                self.conns[job.job, w] = conn
                connections.append(conn)
        self.config = SwitchConfig(mac=SWITCH_MAC, ip=SWITCH_IP, ports=ports,
                                   forwarding={host_mac(h): h % ports for h in range(workers)},
                                   jobs=self.jobs, connections=connections)
        self.switch = SwitchModel(self.config)

    def write(self, job, w, psn_offset, opcode, payload, **fields):
        conn = self.conns[job, w]
        extra = {"reth": (0x1000, 0x77, len(payload))} if opcode in (FIRST, ONLY) else {}
        extra.update(fields)
        return build_roce_frame(opcode, payload, eth_src=host_mac(w), eth_dst=conn.responder_mac,
                                src_ip=conn.requester_ip, dst_ip=conn.responder_ip,
                                dest_qp=conn.responder_qpn, psn=(conn.start_psn + psn_offset) % (1 << 24),
                                **extra)

    def ack(self, job, w, psn_offset, syndrome=0):
        conn = self.conns[job, w]
        return build_ack((conn.start_psn + psn_offset) % (1 << 24), 1, syndrome,
                         eth_src=conn.responder_mac, eth_dst=conn.requester_mac, src_ip=conn.responder_ip,
                         dst_ip=conn.requester_ip, dest_qp=conn.requester_qpn)

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
