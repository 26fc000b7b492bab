"""The UC endpoints (netreduce.host.uc) against the IBA's Unreliable Connection rules: packets sent once,
no answers, a FIRST or ONLY taken at any PSN, a gap costing its message only, the immediate delivered."""

import pytest

from netreduce.host.packets import build_roce_frame, dissect
from netreduce.host.rc import Endpoint, Memory, SourcePort
from netreduce.host.uc import UcRequester, UcResponder
from netreduce.sim.roce_model import parse_frame
from netreduce.wire import UC_WRITE_OPCODES

REQ = Endpoint(0x020000000001, "10.0.0.1", 0x11)
RSP = Endpoint(0x020000000002, "10.0.0.2", 0x22)
VA, RKEY = 0x1000, 0x77
FIRST, MIDDLE, LAST, ONLY_IMM = (UC_WRITE_OPCODES[n] for n in ("FIRST", "MIDDLE", "LAST", "ONLY_WITH_IMMEDIATE"))


def responder(size=4096, start_psn=0, mtu=256):
    memory = Memory()
    memory.register(VA, size, RKEY)
    return UcResponder(RSP, REQ, memory=memory, start_psn=start_psn, mtu=mtu), memory


def frame(opcode, psn, payload, **fields):
    values = {"eth_src": REQ.mac, "eth_dst": RSP.mac, "src_ip": REQ.ip, "dst_ip": RSP.ip, "dest_qp": RSP.qpn,
              "psn": psn}
    values.update(fields)
    return build_roce_frame(opcode, payload, **values)


def test_requester_sends_each_packet_once_and_completes_at_once():
    requester = UcRequester(REQ, RSP, start_psn=(1 << 24) - 1, mtu=256)
    a = requester.post_write(bytes(range(200)) * 3, va=VA, rkey=RKEY, immediate=0xABCD)
    b = requester.post_write(b"\x01" * 40, va=VA + 4096, rkey=RKEY, immediate=5, dscp=33)
    frames = requester.poll(0)
    assert requester.poll(1) == [] and requester.idle and requester.next_timer() is None
    assert list(requester.completions) == [a, b] and requester.stats["packets_sent"] == 4
    packets = [dissect(f) for f in frames]
    assert [p["BTH"].opcode for p in packets] == [FIRST, MIDDLE, UC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"], ONLY_IMM]
    assert [p["BTH"].psn for p in packets] == [(1 << 24) - 1, 0, 1, 2]
    assert [p["BTH"].ackreq for p in packets] == [0, 0, 0, 0]
    assert (packets[0]["RETH"].va, packets[0]["RETH"].dma_len) == (VA, 600) and packets[2]["ImmDt"].immdt == 0xABCD
    assert packets[3]["ImmDt"].immdt == 5 and packets[3]["IP"].tos >> 2 == 33 and packets[0]["IP"].tos == 0
    requester.receive(frames[0], 0)
    assert requester.stats["ignored"] == 1 and requester.error is None and requester.failed == []


def test_per_packet_source_ports():
    requester = UcRequester(REQ, RSP, source_port=SourcePort.PER_PACKET)
    for _ in range(8):
        requester.post_write(b"\x00" * 8, va=VA, rkey=RKEY, immediate=1)
    ports = {parse_frame(f).header["udp_sport"] for f in requester.poll(0)}
    assert len(ports) > 4 and all(0xC000 <= p <= 0xFFFF for p in ports)


def test_round_trip_delivers_the_immediate():
    requester = UcRequester(REQ, RSP, start_psn=9, mtu=256)
    rsp, memory = responder(start_psn=9)
    requester.post_write(b"abcd" * 100, va=VA, rkey=RKEY, immediate=0x55)
    requester.post_write(b"wxyz", va=VA + 1024, rkey=RKEY, immediate=0x66)
    for f in requester.poll(0):
        assert rsp.receive(f, 0) == []
    assert list(rsp.completions) == [(VA, 400, 0x55), (VA + 1024, 4, 0x66)]
    assert memory.read(VA, 400) == b"abcd" * 100 and memory.read(VA + 1024, 4) == b"wxyz"


def test_write_only_is_taken_at_any_psn_and_again_when_duplicated():
    rsp, memory = responder(start_psn=100)
    only = frame(ONLY_IMM, 5000, b"\x07" * 8, reth=(VA, RKEY, 8), immdt=3)
    assert rsp.receive(only, 0) == [] and rsp.expected_psn == 5001
    assert rsp.receive(frame(ONLY_IMM, 17, b"\x08" * 8, reth=(VA + 8, RKEY, 8), immdt=4), 0) == []
    rsp.receive(only, 0)
    assert list(rsp.completions) == [(VA, 8, 3), (VA + 8, 8, 4), (VA, 8, 3)]
    assert rsp.stats["messages_delivered"] == 3 and rsp.stats["out_of_sequence"] == 0


def test_a_gap_costs_its_message_only():
    rsp, memory = responder(start_psn=0, mtu=256)
    assert rsp.receive(frame(FIRST, 0, b"\x01" * 256, reth=(VA, RKEY, 600)), 0) == []
    # PSN 1 is lost: the LAST at PSN 2 drops the message, a later MIDDLE is ignored too
    rsp.receive(frame(LAST, 2, b"\x01" * 88), 0)
    rsp.receive(frame(MIDDLE, 3, b"\x01" * 256), 0)
    assert rsp.stats["out_of_sequence"] == 2 and rsp.stats["messages_dropped"] == 1
    # a FIRST starts the next message whatever its PSN; a FIRST inside a message drops that one
    rsp.receive(frame(FIRST, 10, b"\x02" * 256, reth=(VA, RKEY, 300)), 0)
    rsp.receive(frame(FIRST, 20, b"\x03" * 256, reth=(VA + 1024, RKEY, 300)), 0)
    rsp.receive(frame(UC_WRITE_OPCODES["LAST_WITH_IMMEDIATE"], 21, b"\x03" * 44, immdt=9), 0)
    assert list(rsp.completions) == [(VA + 1024, 300, 9)] and rsp.stats["messages_dropped"] == 2
    assert memory.read(VA + 1024, 300) == b"\x03" * 300


@pytest.mark.parametrize("case,reason", [
    ({"reth": (VA, RKEY + 1, 8)}, "dropped_access"),
    ({"reth": (VA + 4092, RKEY, 8)}, "dropped_access"),
    ({"reth": (VA, RKEY, 12)}, "dropped_length"),
])
def test_bad_writes_are_dropped_and_the_qp_goes_on(case, reason):
    rsp, _ = responder()
    assert rsp.receive(frame(ONLY_IMM, 0, b"\x01" * 8, immdt=1, **case), 0) == []
    assert rsp.stats[reason] == 1 and rsp.stats["messages_dropped"] == 1 and not rsp.completions
    rsp.receive(frame(ONLY_IMM, 1, b"\x01" * 8, reth=(VA, RKEY, 8), immdt=1), 0)
    assert list(rsp.completions) == [(VA, 8, 1)] and rsp.error is None


def test_frames_not_for_the_qp_and_other_opcodes_are_dropped():
    rsp, _ = responder()
    rsp.receive(frame(0x0B, 0, b"\x01" * 8, reth=(VA, RKEY, 8), immdt=1), 0)          # RC
    rsp.receive(frame(UC_WRITE_OPCODES["ONLY"] - 0x06, 0, b"\x01" * 8), 0)            # UC SEND ONLY
    rsp.receive(frame(ONLY_IMM, 0, b"\x01" * 8, reth=(VA, RKEY, 8), immdt=1, dest_qp=0x23), 0)
    rsp.receive(frame(ONLY_IMM, 0, b"\x01" * 8, reth=(VA, RKEY, 8), immdt=1, icrc=0), 0)
    assert (rsp.stats["dropped_opcode"], rsp.stats["dropped_not_for_qp"], rsp.stats["dropped_bad_frame"]) == (2, 1, 1)
    assert not rsp.completions
