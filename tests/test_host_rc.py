"""RC requester and responder (netreduce.host.rc) against the IBA 9.7 rules.

Hand-made frames are built with scapy (netreduce.host.packets), independently of the endpoints' own
builder, and frames the endpoints emit are read back with scapy or, in the network simulation, with fixed
byte offsets of the RoCE v2 headers. Expected outcomes are derived from the rules (cumulative ACKs,
go-back-N, one NAK per gap, duplicates re-ACKed, retry limit), never from the implementation's output.
"""

import heapq
import random

import pytest
from hypothesis import given, settings, strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netreduce.host.icrc import icrc_ok, ipv4_checksum_ok
from netreduce.host.packets import AETH, BTH, RETH, ImmDt, build_ack, build_roce_frame, dissect
from netreduce.host.rc import RNR_TIMER_NS, Endpoint, Memory, RcRequester, RcResponder
from netreduce.sim.roce_model import parse_frame

REQ = Endpoint(0x02_00_00_00_00_01, "10.0.0.1", 0x000A11, 0xC001)
RSP = Endpoint(0x02_00_00_00_00_02, "10.0.0.2", 0x000B22, 0xC002)
MOD = 1 << 24

FIRST, MIDDLE, LAST, LAST_IMM, ONLY, ONLY_IMM, ACK = 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x11
ACK_UNLIMITED = 0x1F          # ACK syndrome 000 + credit count 11111 (no credit limit)
NAK_SEQ, NAK_INV, NAK_ACC, NAK_OP = 0x60, 0x61, 0x62, 0x63

VA, RKEY, SIZE = 0x10000, 0x1234, 1 << 16
NET_SIZE = 1 << 20          # the region of the network simulations


# --- independent frame helpers ----------------------------------------------------------------------------

def data_frame(opcode, psn, payload=b"", *, ack_req=0, reth=None, immdt=None, **fields):
    """A request frame from REQ to RSP, built with scapy."""
    args = dict(eth_src=REQ.mac, eth_dst=RSP.mac, src_ip=REQ.ip, dst_ip=RSP.ip, sport=REQ.udp_sport,
                dest_qp=RSP.qpn, psn=psn % MOD, ack_req=ack_req, reth=reth, immdt=immdt)
    args.update(fields)
    return build_roce_frame(opcode, payload, **args)


def ack_frame(psn, syndrome=ACK_UNLIMITED, msn=0, **fields):
    """An ACK/NAK frame from RSP to REQ, built with scapy."""
    args = dict(eth_src=RSP.mac, eth_dst=REQ.mac, src_ip=RSP.ip, dst_ip=REQ.ip, sport=RSP.udp_sport,
                dest_qp=REQ.qpn)
    args.update(fields)
    return build_ack(psn % MOD, msn, syndrome, **args)


def decode(frame):
    """What scapy reads in a frame: BTH fields, extension headers, payload without pad."""
    pkt = dissect(frame)
    bth = pkt[BTH]
    raw = bytes(pkt[Raw].load) if Raw in pkt else b""
    return {
        "opcode": bth.opcode, "psn": bth.psn, "ack_req": bth.ackreq, "dest_qp": bth.dqpn, "pad": bth.padcount,
        "reth": (pkt[RETH].va, pkt[RETH].rkey, pkt[RETH].dma_len) if RETH in pkt else None,
        "immdt": pkt[ImmDt].immdt if ImmDt in pkt else None,
        "aeth": (pkt[AETH].syndrome, pkt[AETH].msn) if AETH in pkt else None,
        "payload": raw[:len(raw) - bth.padcount],
    }


# raw byte offsets of an untagged IPv4 RoCE v2 frame (Ethernet 14, IPv4 20, UDP 8): independent of scapy
def raw_opcode(frame):
    return frame[42]


def raw_psn(frame):
    return int.from_bytes(frame[51:54], "big")


def raw_syndrome(frame):
    return frame[54]        # first AETH byte of an ACKNOWLEDGE (no RETH/ImmDt before it)


def n_packets(size, mtu):
    return max(1, -(-size // mtu))


def requester(**kw):
    kw.setdefault("mtu", 256)
    return RcRequester(REQ, RSP, **kw)


def responder(memory=None, **kw):
    if memory is None:
        memory = Memory()
        memory.register(VA, SIZE, RKEY)
    kw.setdefault("mtu", 256)
    return RcResponder(RSP, REQ, memory=memory, **kw)


# --- requester: segmentation and headers ------------------------------------------------------------------

@pytest.mark.parametrize("mtu", [64, 256, 1024])
def test_segmentation_opcodes_reth_immdt_ackreq(mtu):
    sizes = [0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 3 * mtu + 5]
    rng = random.Random(mtu)
    req = requester(mtu=mtu, start_psn=100, max_outstanding=1000)
    posted = []
    for i, size in enumerate(sizes):
        for imm in (None, 0xC0DE0000 + i):
            data = rng.randbytes(size)
            va = VA + 0x1000 * len(posted)
            assert req.post_write(data, va=va, rkey=RKEY, immediate=imm) == len(posted)
            posted.append((data, va, imm))
    frames = req.poll(0)
    assert len(frames) == sum(n_packets(len(d), mtu) for d, _, _ in posted)
    records = [decode(f) for f in frames]
    assert [r["psn"] for r in records] == list(range(100, 100 + len(frames)))
    i = 0
    for data, va, imm in posted:
        n = n_packets(len(data), mtu)
        msg = records[i:i + n]
        i += n
        if n == 1:
            assert [r["opcode"] for r in msg] == [ONLY if imm is None else ONLY_IMM]
        else:
            assert [r["opcode"] for r in msg] == ([FIRST] + [MIDDLE] * (n - 2)
                                                 + [LAST if imm is None else LAST_IMM])
        assert msg[0]["reth"] == (va, RKEY, len(data))
        assert all(r["reth"] is None for r in msg[1:])
        assert all(r["immdt"] is None for r in msg[:-1]) and msg[-1]["immdt"] == imm
        assert [r["ack_req"] for r in msg] == [0] * (n - 1) + [1]
        assert all(len(r["payload"]) == mtu for r in msg[:-1])
        assert b"".join(r["payload"] for r in msg) == data
        assert all(r["dest_qp"] == RSP.qpn for r in msg)
        assert all(r["pad"] == -len(r["payload"]) % 4 for r in msg)


def test_frames_dissect_with_right_layers_addresses_and_checksums():
    req = requester(mtu=64)
    data = bytes(range(150))
    req.post_write(data, va=VA, rkey=RKEY, immediate=7)
    req.post_write(b"", va=0, rkey=0)
    resp = responder(mtu=64)
    frames = req.poll(0)
    acks = [a for f in frames for a in resp.receive(f, 0)]
    assert len(frames) == 4 and len(acks) == 2
    expected_layers = [[RETH], [], [ImmDt], [RETH]]
    for frame, ext in zip(frames, expected_layers, strict=True):
        assert len(frame) >= 60
        assert icrc_ok(frame)
        assert ipv4_checksum_ok(frame[14:34])
        pkt = dissect(frame)
        assert pkt[Ether].src == "02:00:00:00:00:01" and pkt[Ether].dst == "02:00:00:00:00:02"
        assert pkt[IP].src == REQ.ip and pkt[IP].dst == RSP.ip and pkt[IP].proto == 17
        assert pkt[IP].len == len(frame) - 14 and pkt[UDP].len == pkt[IP].len - 20
        assert pkt[UDP].sport == REQ.udp_sport and pkt[UDP].dport == 4791
        layers = pkt.layers()
        assert layers[:4] == [Ether, IP, UDP, BTH]
        assert [c for c in layers if c in (RETH, ImmDt, AETH)] == ext
    for frame in acks:
        assert icrc_ok(frame) and ipv4_checksum_ok(frame[14:34])
        pkt = dissect(frame)
        assert pkt[IP].src == RSP.ip and pkt[IP].dst == REQ.ip
        assert pkt[UDP].sport == RSP.udp_sport and pkt[UDP].dport == 4791
        assert pkt[BTH].opcode == ACK and pkt[BTH].dqpn == REQ.qpn
        assert pkt.layers() == [Ether, IP, UDP, BTH, AETH] and pkt[AETH].syndrome == ACK_UNLIMITED
    assert [decode(a)["psn"] for a in acks] == [2, 3]
    assert [decode(a)["aeth"][1] for a in acks] == [1, 2]          # MSN counts completed messages


def test_psn_wraps_around():
    req = requester(mtu=64, start_psn=MOD - 2)
    req.post_write(bytes(64 * 4), va=VA, rkey=RKEY)
    assert [decode(f)["psn"] for f in req.poll(0)] == [MOD - 2, MOD - 1, 0, 1]
    req.receive(ack_frame(1), 10)
    assert list(req.completions) == [0]


# --- requester: window and acknowledgements -----------------------------------------------------------------

def test_psns_continue_across_work_requests_posted_later():
    req = requester(mtu=64, start_psn=MOD - 1)
    assert req.idle and not req.can_send and req.poll(0) == []
    req.post_write(bytes(100), va=VA, rkey=RKEY)
    assert req.can_send and not req.idle
    assert [decode(f)["psn"] for f in req.poll(0)] == [MOD - 1, 0]
    req.receive(ack_frame(0), 5)
    assert list(req.completions) == [0] and req.idle
    req.post_write(b"z", va=VA, rkey=RKEY, immediate=1)
    assert [(decode(f)["psn"], decode(f)["opcode"]) for f in req.poll(6)] == [(1, ONLY_IMM)]


def test_window_limits_outstanding_packets_and_acks_open_it():
    req = requester(mtu=64, max_outstanding=4)
    req.post_write(bytes(64 * 10), va=VA, rkey=RKEY)
    first = [decode(f) for f in req.poll(0)]
    assert [r["psn"] for r in first] == [0, 1, 2, 3]
    assert first[-1]["ack_req"] == 1          # the packet that fills the window asks for an ACK
    assert req.poll(1) == [] and not req.can_send
    req.receive(ack_frame(1), 2)               # PSNs 0, 1 acknowledged: two more may go
    assert [decode(f)["psn"] for f in req.poll(2)] == [4, 5]
    assert list(req.completions) == []         # the message's last packet is not acknowledged yet


def test_cumulative_ack_completes_work_requests_in_order():
    req = requester(mtu=64)
    for size in (10, 100, 10, 200):            # packets 0 | 1-2 | 3 | 4-7
        req.post_write(bytes(size), va=VA, rkey=RKEY)
    assert len(req.poll(0)) == 8
    req.receive(ack_frame(1), 1)               # in the middle of message 1: only message 0 done
    assert list(req.completions) == [0]
    req.receive(ack_frame(5), 2)               # covers messages 1, 2 and part of 3
    assert list(req.completions) == [0, 1, 2]
    req.receive(ack_frame(7), 3)
    assert list(req.completions) == [0, 1, 2, 3] and req.idle
    assert req.next_timer() is None            # nothing outstanding: no timer
    assert req.stats["acks_received"] == 3 and req.stats["retransmitted_packets"] == 0


def test_stale_duplicate_and_future_acks_are_ignored():
    req = requester(mtu=64, start_psn=MOD - 1)
    req.post_write(bytes(64 * 3), va=VA, rkey=RKEY)      # PSNs MOD-1, 0, 1
    assert len(req.poll(0)) == 3
    req.receive(ack_frame(5), 1)               # never sent: ignored
    req.receive(ack_frame(MOD - 2), 1)         # before anything outstanding: stale
    assert req.una == MOD - 1 and not req.completions
    req.receive(ack_frame(0), 2)
    assert req.una == 1
    timer = req.next_timer()
    req.receive(ack_frame(0), 50)              # duplicate: no progress, timer not restarted
    req.receive(ack_frame(MOD - 1), 50)        # stale
    assert req.una == 1 and req.next_timer() == timer
    assert req.stats["stale_responses"] == 4
    req.receive(ack_frame(1), 60)
    assert list(req.completions) == [0]


def test_frames_not_for_the_qp_or_with_bad_icrc_are_dropped():
    req = requester(mtu=64)
    req.post_write(bytes(10), va=VA, rkey=RKEY)
    req.poll(0)
    req.receive(ack_frame(0, dest_qp=REQ.qpn + 1), 1)
    req.receive(ack_frame(0, src_ip="10.0.0.9"), 1)
    req.receive(ack_frame(0, icrc=b"\0\0\0\0"), 1)
    req.receive(ack_frame(0, pkey=0x1234), 1)
    assert not req.completions and req.stats["dropped"] == 4
    req.receive(ack_frame(0), 1)
    assert list(req.completions) == [0]


# --- requester: go-back-N ---------------------------------------------------------------------------------

def test_sequence_nak_goes_back_mid_message_with_middle_opcode():
    req = requester(mtu=64)
    req.post_write(bytes(20), va=VA, rkey=RKEY)                        # PSN 0
    data = bytes(range(64)) * 4 + b"tail"
    req.post_write(data, va=VA + 0x1000, rkey=RKEY, immediate=9)       # PSNs 1..5
    assert len(req.poll(0)) == 6
    req.receive(ack_frame(3, NAK_SEQ, msn=1), 10)   # 0..2 acknowledged, resend from 3
    assert list(req.completions) == [0]
    again = [decode(f) for f in req.poll(10)]
    assert [r["psn"] for r in again] == [3, 4, 5]
    assert [r["opcode"] for r in again] == [MIDDLE, MIDDLE, LAST_IMM]
    assert again[0]["reth"] is None and again[-1]["immdt"] == 9
    assert again[0]["payload"] == data[128:192] and again[-1]["payload"] == b"tail"
    assert req.stats["retransmitted_packets"] == 3 and req.stats["naks_received"] == 1


def test_sequence_nak_at_a_first_packet_resends_its_reth():
    req = requester(mtu=64)
    req.post_write(bytes(100), va=VA, rkey=RKEY)          # PSNs 0, 1
    req.post_write(bytes(130), va=VA + 0x800, rkey=RKEY)  # PSNs 2, 3, 4
    req.poll(0)
    req.receive(ack_frame(2, NAK_SEQ, msn=1), 5)
    again = [decode(f) for f in req.poll(5)]
    assert [r["psn"] for r in again] == [2, 3, 4]
    assert again[0]["opcode"] == FIRST and again[0]["reth"] == (VA + 0x800, RKEY, 130)
    assert list(req.completions) == [0]


def test_duplicate_nak_does_not_restart_the_resend():
    req = requester(mtu=64)
    req.post_write(bytes(64 * 8), va=VA, rkey=RKEY)
    req.poll(0)
    req.receive(ack_frame(2, NAK_SEQ), 10)
    assert [decode(f)["psn"] for f in req.poll(10)] == list(range(2, 8))
    for t in (11, 12, 13):                    # copies / late NAKs for the same gap
        req.receive(ack_frame(2, NAK_SEQ), t)
        assert req.poll(t) == []
    assert req.stats["retransmitted_packets"] == 6 and req.stats["duplicate_naks"] == 3
    req.receive(ack_frame(4), 20)             # progress; a NAK for a later gap is a new one
    req.receive(ack_frame(6, NAK_SEQ), 21)
    assert [decode(f)["psn"] for f in req.poll(21)] == [6, 7]


def test_nak_for_a_psn_already_resent_by_timeout_is_not_resent_again():
    req = requester(mtu=64, timeout_ns=1000)
    req.post_write(bytes(64 * 3), va=VA, rkey=RKEY)
    req.poll(0)
    assert [decode(f)["psn"] for f in req.poll(1000)] == [0, 1, 2]   # timeout: resend from 0
    req.receive(ack_frame(0, NAK_SEQ), 1100)   # the NAK of the first round, late
    assert req.poll(1100) == []


def test_timeout_resends_from_oldest_unacknowledged_packet():
    req = requester(mtu=64, timeout_ns=5000)
    req.post_write(bytes(64 * 3), va=VA, rkey=RKEY)
    assert len(req.poll(100)) == 3
    assert req.next_timer() == 5100
    assert req.poll(5099) == []
    req.receive(ack_frame(0), 200)            # progress restarts the timer
    assert req.next_timer() == 5200
    assert req.poll(5199) == []
    again = [decode(f) for f in req.poll(5200)]
    assert [r["psn"] for r in again] == [1, 2]
    assert [r["opcode"] for r in again] == [MIDDLE, LAST]
    assert req.stats["timeouts"] == 1 and req.stats["retransmitted_packets"] == 2
    assert req.next_timer() == 10200


def test_retry_limit_turns_silence_into_the_error_state():
    req = requester(mtu=64, timeout_ns=1000, retry_limit=3)
    req.post_write(bytes(64 * 2), va=VA, rkey=RKEY)
    req.post_write(bytes(1), va=VA, rkey=RKEY)
    assert len(req.poll(0)) == 3
    for retry in range(1, 4):
        assert len(req.poll(retry * 1000)) == 3
    assert req.error is None
    assert req.poll(4000) == []               # fourth timeout: retry limit 3 exceeded
    assert req.error is not None and "retry" in req.error
    assert req.failed == [0, 1] and not req.completions
    assert req.next_timer() is None and req.poll(10_000) == []
    assert req.stats["timeouts"] == 4 and req.stats["retransmitted_packets"] == 9
    assert req.post_write(b"x", va=VA, rkey=RKEY) == 2 and req.failed == [0, 1, 2]


def test_progress_resets_the_retry_count():
    req = requester(mtu=64, timeout_ns=1000, retry_limit=2)
    req.post_write(bytes(64 * 4), va=VA, rkey=RKEY)
    req.poll(0)
    req.poll(1000)
    req.poll(2000)                            # two retries used
    req.receive(ack_frame(0), 2500)           # progress
    req.poll(3500)
    req.poll(4500)                            # two more retries: allowed again
    assert req.error is None
    req.poll(5500)
    assert req.error is not None


@pytest.mark.parametrize("code", [NAK_INV, NAK_ACC, NAK_OP])
def test_fatal_naks_put_the_qp_in_the_error_state(code):
    req = requester(mtu=64)
    req.post_write(bytes(10), va=VA, rkey=RKEY)
    req.post_write(bytes(10), va=VA, rkey=RKEY)
    req.poll(0)
    req.receive(ack_frame(1, code, msn=1), 10)
    assert req.error is not None
    assert list(req.completions) == [0] and req.failed == [1]   # the NAK acknowledged nothing past 0
    assert req.poll(10) == [] and req.next_timer() is None


def test_naks_for_psns_not_outstanding_and_reserved_syndromes_are_ignored():
    req = requester(mtu=64)
    req.post_write(bytes(64 * 3), va=VA, rkey=RKEY)      # PSNs 0..2
    req.poll(0)
    req.receive(ack_frame(0), 1)
    for frame in (ack_frame(3, NAK_SEQ),                   # never sent
                  ack_frame(0, NAK_SEQ),                   # already acknowledged
                  ack_frame(MOD - 1, NAK_ACC),             # fatal code, but stale
                  ack_frame(1, 0x40), ack_frame(1, 0x80)):  # reserved syndrome classes 010 and 1xx
        req.receive(frame, 2)
        assert req.poll(2) == [] and req.error is None
    assert req.una == 1 and req.stats["retransmitted_packets"] == 0


def test_rnr_nak_waits_its_timer_then_resends():
    req = requester(mtu=64)
    req.post_write(bytes(10), va=VA, rkey=RKEY)
    req.post_write(bytes(10), va=VA, rkey=RKEY, immediate=1)
    req.poll(0)
    req.receive(ack_frame(1, 0x20 | 1, msn=1), 100)   # RNR NAK, timer code 1 (0.01 ms)
    assert list(req.completions) == [0]
    wait = RNR_TIMER_NS[1]
    assert wait == 10_000 and req.next_timer() == 100 + wait
    assert req.poll(100 + wait - 1) == []
    again = [decode(f) for f in req.poll(100 + wait)]
    assert [(r["psn"], r["opcode"]) for r in again] == [(1, ONLY_IMM)]


# --- responder ---------------------------------------------------------------------------------------------

def test_responder_writes_delivers_and_acks_on_ackreq():
    resp = responder(start_psn=10)
    data = bytes(range(256)) * 2 + b"abc"
    out = resp.receive(data_frame(FIRST, 10, data[:256], reth=(VA + 8, RKEY, len(data))), 0)
    out += resp.receive(data_frame(MIDDLE, 11, data[256:512]), 0)
    assert out == [] and not resp.completions                 # no AckReq: coalesced
    out = resp.receive(data_frame(LAST_IMM, 12, data[512:], immdt=0xABCD, ack_req=1), 0)
    assert resp.memory.read(VA + 8, len(data)) == data
    assert resp.memory.read(VA, 8) == bytes(8)                 # nothing outside the write
    assert list(resp.completions) == [(VA + 8, len(data), 0xABCD)]
    assert [decode(f)["aeth"] for f in out] == [(ACK_UNLIMITED, 1)]
    assert decode(out[0])["psn"] == 12 and decode(out[0])["dest_qp"] == REQ.qpn


def test_a_frame_parsed_by_the_caller_is_used_as_is():
    resp = responder()
    frame = data_frame(ONLY, 0, b"data", reth=(VA, RKEY, 4), ack_req=1)
    acks = resp.receive(frame, 0, parse_frame(frame))
    req = requester()
    req.post_write(b"data", va=VA, rkey=RKEY)
    req.poll(0)
    req.receive(acks[0], 1, parse_frame(acks[0]))
    assert list(req.completions) == [0] and resp.memory.read(VA, 4) == b"data"


def test_responder_ack_coalescing_every_k_packets():
    resp = responder(ack_coalesce=2)
    frames = [data_frame(FIRST, 0, bytes(256), reth=(VA, RKEY, 5 * 256))]
    frames += [data_frame(MIDDLE, p, bytes(256)) for p in (1, 2, 3)]
    frames += [data_frame(LAST, 4, bytes(256))]
    acks = [[decode(a)["psn"] for a in resp.receive(f, 0)] for f in frames]
    assert acks == [[], [1], [], [3], []]


def test_one_sequence_nak_per_gap():
    resp = responder(start_psn=5)
    assert resp.receive(data_frame(ONLY, 5, b"a" * 4, reth=(VA, RKEY, 4)), 0) == []   # expected -> 6
    out = []
    for psn in (8, 9, 7, 10):                 # 6 lost: out of sequence, ahead
        out += resp.receive(data_frame(ONLY, psn, b"x" * 4, reth=(VA + 64, RKEY, 4), ack_req=1), 0)
    assert [(decode(f)["psn"], decode(f)["aeth"]) for f in out] == [(6, (NAK_SEQ, 1))]
    assert resp.memory.read(VA + 64, 4) == bytes(4) and len(resp.completions) == 1
    # the gap is repaired by PSN 6; a new gap (7 missing) gets a new NAK
    assert resp.receive(data_frame(ONLY, 6, b"b" * 4, reth=(VA + 4, RKEY, 4)), 0) == []
    out = resp.receive(data_frame(ONLY, 9, b"c" * 4, reth=(VA + 8, RKEY, 4)), 0)
    out += resp.receive(data_frame(ONLY, 8, b"c" * 4, reth=(VA + 8, RKEY, 4)), 0)
    assert [(decode(f)["psn"], decode(f)["aeth"]) for f in out] == [(7, (NAK_SEQ, 2))]


def test_duplicates_are_reacked_and_never_rewritten_or_redelivered():
    resp = responder(start_psn=MOD - 1)
    assert resp.receive(data_frame(FIRST, MOD - 1, b"A" * 256, reth=(VA, RKEY, 260)), 0) == []
    out = resp.receive(data_frame(LAST, 0, b"B" * 4, ack_req=1), 0)         # PSN wrapped
    assert [decode(f)["psn"] for f in out] == [0]
    # same PSNs again, different bytes, with and without AckReq: ACK with the last in-sequence PSN (0)
    for frame in (data_frame(FIRST, MOD - 1, b"Z" * 256, reth=(VA, RKEY, 260)),
                  data_frame(LAST, 0, b"Z" * 4, ack_req=1),
                  data_frame(ONLY, MOD - 40, b"Z" * 4, reth=(VA, RKEY, 4))):
        out = resp.receive(frame, 0)
        assert [(decode(f)["psn"], decode(f)["aeth"]) for f in out] == [(0, (ACK_UNLIMITED, 1))]
    assert resp.memory.read(VA, 260) == b"A" * 256 + b"B" * 4
    assert list(resp.completions) == [(VA, 260, None)]
    assert resp.stats["duplicates"] == 3


def test_ahead_and_behind_split_the_psn_space_in_halves():
    resp = responder(start_psn=100)
    ahead = resp.receive(data_frame(ONLY, 100 + (1 << 23) - 1, b"x", reth=(VA, RKEY, 1)), 0)
    assert [decode(f)["aeth"][0] for f in ahead] == [NAK_SEQ]
    behind = resp.receive(data_frame(ONLY, 100 + (1 << 23), b"x", reth=(VA, RKEY, 1)), 0)
    assert [(decode(f)["psn"], decode(f)["aeth"][0]) for f in behind] == [(99, ACK_UNLIMITED)]
    assert not resp.completions


@pytest.mark.parametrize("frames", [
    [(MIDDLE, b"x" * 256, {})],                                           # MIDDLE between messages
    [(LAST, b"x" * 4, {})],                                               # LAST between messages
    [(FIRST, b"x" * 256, {"reth": (VA, RKEY, 600)}), (FIRST, b"x" * 256, {"reth": (VA, RKEY, 600)})],
    [(FIRST, b"x" * 256, {"reth": (VA, RKEY, 600)}), (ONLY, b"x" * 4, {"reth": (VA, RKEY, 4)})],
    [(FIRST, b"x" * 252, {"reth": (VA, RKEY, 600)})],                     # FIRST shorter than the MTU
    [(FIRST, b"x" * 256, {"reth": (VA, RKEY, 600)}), (LAST, b"x" * 100, {})],   # 356 != 600 bytes
    [(FIRST, b"x" * 256, {"reth": (VA, RKEY, 300)}), (MIDDLE, b"x" * 256, {})],  # past the DMA length
    [(ONLY, b"x" * 8, {"reth": (VA, RKEY, 4)})],                          # ONLY longer than its RETH
    [(0x04, b"send", {})],                                                # RC SEND: not supported
], ids=["middle", "last", "first-first", "first-only", "short-first", "short-total", "long-total",
        "only-length", "send"])
def test_invalid_requests_are_nakked_and_stop_the_responder(frames):
    resp = responder(start_psn=7)
    out = []
    for psn, (opcode, payload, kw) in enumerate(frames, start=7):
        out = resp.receive(data_frame(opcode, psn, payload, **kw), 0)
    bad_psn = 7 + len(frames) - 1
    assert [(decode(f)["psn"], decode(f)["aeth"]) for f in out] == [(bad_psn, (NAK_INV, 0))]
    assert resp.error is not None and not resp.completions
    assert resp.receive(data_frame(ONLY, bad_psn, b"y", reth=(VA, RKEY, 1), ack_req=1), 0) == []


def test_remote_access_errors():
    memory = Memory()
    memory.register(VA, 1024, RKEY)
    memory.register(VA + 4096, 1024, RKEY + 1, remote_write=False)
    for reth in [(VA, RKEY + 7, 4),              # unknown R_Key
                 (VA + 1022, RKEY, 4),           # runs past the region
                 (VA - 4, RKEY, 8),              # starts before it
                 (VA + 4096, RKEY + 1, 4)]:      # region without remote write
        resp = responder(memory)
        out = resp.receive(data_frame(ONLY, 0, b"data", reth=reth, ack_req=1), 0)
        assert [decode(f)["aeth"] for f in out] == [(NAK_ACC, 0)]
        assert resp.error is not None and not resp.completions
    assert memory.read(VA, 1024) == bytes(1024)


def test_zero_length_write_is_not_checked_against_the_rkey():
    resp = responder()
    out = resp.receive(data_frame(ONLY_IMM, 0, b"", reth=(0xDEAD0000, 0x9999, 0), immdt=3, ack_req=1), 0)
    assert [decode(f)["aeth"] for f in out] == [(ACK_UNLIMITED, 1)]
    assert list(resp.completions) == [(0xDEAD0000, 0, 3)]


def test_responder_drops_bad_icrc_and_foreign_frames_silently():
    resp = responder()
    good = dict(reth=(VA, RKEY, 4), ack_req=1)
    for frame in (data_frame(ONLY, 0, b"data", icrc=b"\x01\x02\x03\x04", **good),
                  data_frame(ONLY, 0, b"data", ipv4_csum=0x1234, **good),
                  data_frame(ONLY, 0, b"data", dest_qp=RSP.qpn + 1, **good),
                  data_frame(ONLY, 0, b"data", src_ip="10.0.0.3", **good),
                  data_frame(ONLY, 0, b"data", dst_ip="10.0.0.4", **good),
                  data_frame(ONLY, 0, b"data", dport=4792, **good),
                  data_frame(0x64, 0, b"data", deth=(1, 2))):               # UD opcode on the RC QP
        assert resp.receive(frame, 0) == []
    assert resp.stats["dropped_bad_frame"] == 2
    assert resp.stats["dropped_not_for_qp"] == 4 and resp.stats["dropped_opcode"] == 1
    assert resp.expected_psn == 0 and resp.memory.read(VA, 4) == bytes(4)
    out = resp.receive(data_frame(ONLY, 0, b"data", **good), 0)
    assert [decode(f)["aeth"] for f in out] == [(ACK_UNLIMITED, 1)]


# --- the two endpoints over a lossy link ------------------------------------------------------------------

class Link:
    """One direction of a link: fixed delay plus seeded loss, duplication, reordering (extra delay),
    corruption (one flipped byte), and an optional ``drop(frame)`` predicate for deterministic losses."""

    def __init__(self, rng, delay=1000, loss=0.0, dup=0.0, reorder=0.0, corrupt=0.0, drop=None):
        self.rng, self.delay = rng, delay
        self.loss, self.dup, self.reorder, self.corrupt, self.drop = loss, dup, reorder, corrupt, drop

    def send(self, frame, now):
        if self.drop is not None and self.drop(frame):
            return []
        copies = 2 if self.rng.random() < self.dup else 1
        out = []
        for _ in range(copies):
            if self.rng.random() < self.loss:
                continue
            t = now + self.delay
            if self.rng.random() < self.reorder:
                t += self.rng.randrange(1, 4 * self.delay)
            g = frame
            if self.rng.random() < self.corrupt:
                i = self.rng.randrange(14, len(frame))
                g = frame[:i] + bytes([frame[i] ^ 0x40]) + frame[i + 1:]
            out.append((t, g))
        return out


class Net:
    """A requester and a responder joined by two Links, run by a discrete-event loop."""

    def __init__(self, req, resp, fwd, back, *, start_psn, window):
        self.req, self.resp, self.fwd, self.back = req, resp, fwd, back
        self.heap, self.seq, self.timers = [], 0, set()
        self.sent, self.returned = [], []      # every frame each endpoint emitted, with its time
        self.now = 0
        self.start, self.window = start_psn, window
        self.acked = 0          # packets the requester has seen acknowledged (ACK p: up to p; NAK p: before p)

    def _push(self, t, kind, frame=None):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, frame))

    def _kick(self, now):
        for frame in self.req.poll(now):
            self.sent.append((now, frame))
            # the window: never more than `window` packets past the acknowledged ones
            assert (raw_psn(frame) - self.start) % MOD < self.acked + self.window
            for t, g in self.fwd.send(frame, now):
                self._push(t, "resp", g)
        deadline = self.req.next_timer()
        if deadline is not None and deadline not in self.timers:
            self.timers.add(deadline)
            self._push(max(deadline, now), "timer")

    def run(self, max_events=500_000):
        self._kick(self.now)
        events = 0
        while self.heap:
            events += 1
            assert events < max_events, "simulation does not terminate"
            t, _, kind, frame = heapq.heappop(self.heap)
            self.now = t
            if kind == "resp":
                for f in self.resp.receive(frame, t):
                    self.returned.append((t, f))
                    for t2, g in self.back.send(f, t):
                        self._push(t2, "req", g)
            elif kind == "req":
                if icrc_ok(frame) and ipv4_checksum_ok(frame[14:34]):
                    syndrome = raw_syndrome(frame)
                    covered = (raw_psn(frame) - self.start) % MOD + (1 if syndrome >> 5 == 0 else 0)
                    self.acked = max(self.acked, covered)
                self.req.receive(frame, t)
                self._kick(t)
            else:
                self.timers.discard(t)
                self._kick(t)
        return self.now


def make_workload(rng, mtu, count):
    sizes = [0, 1, mtu - 1, mtu, mtu + 1, 7 * mtu, 7 * mtu + 3, 2 * mtu]
    sizes += [rng.randrange(0, 6 * mtu) for _ in range(max(0, count - len(sizes)))]
    writes, va = [], VA
    for i, size in enumerate(sizes):
        imm = rng.getrandbits(32) if i % 2 else None
        writes.append((rng.randbytes(size), va, imm))
        va += size + 8                          # 8 untouched bytes between messages
    return writes


def run_pair(seed, *, mtu=256, start_psn=MOD - 20, count=20, max_outstanding=16, ack_coalesce=0,
             timeout_ns=50_000, retry_limit=7, ack_req_every=0, fwd=None, back=None):
    rng = random.Random(seed)
    memory = Memory()
    memory.register(VA, NET_SIZE, RKEY, fill=0xEE)
    req = RcRequester(REQ, RSP, start_psn=start_psn, mtu=mtu, max_outstanding=max_outstanding,
                      timeout_ns=timeout_ns, retry_limit=retry_limit, ack_req_every=ack_req_every)
    resp = RcResponder(RSP, REQ, start_psn=start_psn, memory=memory, mtu=mtu, ack_coalesce=ack_coalesce)
    writes = make_workload(rng, mtu, count)
    for data, va, imm in writes:
        req.post_write(data, va=va, rkey=RKEY, immediate=imm)
    net = Net(req, resp, fwd or Link(rng), back or Link(rng), start_psn=start_psn, window=max_outstanding)
    net.run()
    return net, writes, memory


def assert_delivered_exactly(net, writes, memory, start_psn):
    req, resp = net.req, net.resp
    assert req.error is None and resp.error is None
    assert req.idle and req.next_timer() is None
    assert list(req.completions) == list(range(len(writes)))
    assert list(resp.completions) == [(va, len(data), imm) for data, va, imm in writes]
    image = bytearray([0xEE]) * NET_SIZE
    for data, va, _ in writes:
        image[va - VA:va - VA + len(data)] = data
    assert memory.read(VA, NET_SIZE) == bytes(image)
    # one NAK per gap: a gap ends only when an in-sequence packet advances the expected PSN, so the
    # sequence-error NAKs the responder sent carry strictly increasing PSNs
    naks = [(raw_psn(f) - start_psn) % MOD for _, f in net.returned if raw_syndrome(f) == NAK_SEQ]
    assert naks == sorted(set(naks))
    assert resp.stats["sequence_naks"] == len(naks)
    assert all(raw_opcode(f) == ACK and raw_syndrome(f) in (ACK_UNLIMITED, NAK_SEQ) for _, f in net.returned)
    assert all(icrc_ok(f) for _, f in net.sent + net.returned)


@pytest.mark.parametrize("mtu,max_outstanding,ack_coalesce", [(256, 16, 0), (64, 4, 0), (1024, 64, 3)])
def test_clean_link_delivers_without_retransmissions(mtu, max_outstanding, ack_coalesce):
    start = MOD - 20
    net, writes, memory = run_pair(1, mtu=mtu, start_psn=start, max_outstanding=max_outstanding,
                                   ack_coalesce=ack_coalesce)
    assert_delivered_exactly(net, writes, memory, start)
    total = sum(n_packets(len(d), mtu) for d, _, _ in writes)
    assert net.req.stats["packets_sent"] == total == len(net.sent)
    assert net.req.stats["retransmitted_packets"] == net.req.stats["timeouts"] == 0
    assert net.req.stats["naks_received"] == net.resp.stats["naks_sent"] == 0
    assert net.resp.stats["duplicates"] == net.resp.stats["out_of_sequence"] == 0
    assert total > 20 and (raw_psn(net.sent[-1][1]) - start) % MOD == total - 1    # crossed the wrap
    # every packet in flight was within the window: never more than max_outstanding PSNs ahead of the
    # oldest unacknowledged one (a clean link acknowledges in order)
    psns = [(raw_psn(f) - start) % MOD for _, f in net.sent]
    assert psns == list(range(total))


def test_one_lost_packet_costs_one_nak_and_a_go_back():
    lost = []

    def drop_first_psn_5(frame):           # PSN start+5, first transmission only
        if raw_psn(frame) == (start + 5) % MOD and not lost:
            lost.append(frame)
            return True
        return False

    start = MOD - 3
    rng = random.Random(3)
    net, writes, memory = run_pair(3, mtu=64, start_psn=start, count=8, max_outstanding=1000,
                                   fwd=Link(rng, drop=drop_first_psn_5), back=Link(rng))
    assert_delivered_exactly(net, writes, memory, start)
    total = sum(n_packets(len(d), 64) for d, _, _ in writes)
    assert total > 10
    naks = [raw_psn(f) for _, f in net.returned if raw_syndrome(f) == NAK_SEQ]
    assert naks == [(start + 5) % MOD]
    # everything was sent at time 0 (window 1000); the NAK sends the requester back to PSN start+5 once
    assert net.req.stats["retransmitted_packets"] == total - 5
    assert net.req.stats["timeouts"] == 0 and net.resp.stats["out_of_sequence"] == total - 6


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       faults=st.sampled_from([(0.1, 0, 0, 0), (0, 0.2, 0, 0), (0, 0, 0.3, 0), (0, 0, 0, 0.1),
                               (0.08, 0.05, 0.2, 0.03), (0.25, 0.1, 0.3, 0.05)]),
       shape=st.sampled_from([(256, 16, 0, 0), (64, 5, 0, 3), (1024, 40, 4, 0), (128, 1, 0, 0)]),
       wrap=st.integers(1, 60))
def test_lossy_link_delivers_every_message_exactly_once_in_order(seed, faults, shape, wrap):
    loss, dup, reorder, corrupt = faults
    mtu, window, coalesce, every = shape
    rng = random.Random(seed ^ 0x5A5A)
    start = MOD - wrap
    net, writes, memory = run_pair(seed, mtu=mtu, start_psn=start, count=24, max_outstanding=window,
                                   ack_coalesce=coalesce, ack_req_every=every, timeout_ns=30_000,
                                   retry_limit=50,
                                   fwd=Link(rng, loss=loss, dup=dup, reorder=reorder, corrupt=corrupt),
                                   back=Link(rng, loss=loss, dup=dup, reorder=reorder, corrupt=corrupt))
    assert_delivered_exactly(net, writes, memory, start)
    if net.req.stats["retransmitted_packets"]:
        assert loss or dup or reorder or corrupt


def test_faults_cause_retransmissions_and_duplicates_are_absorbed():
    rng = random.Random(11)
    start = MOD - 7
    net, writes, memory = run_pair(11, start_psn=start, count=30, retry_limit=50,
                                   fwd=Link(rng, loss=0.15, dup=0.15, reorder=0.2, corrupt=0.05),
                                   back=Link(rng, loss=0.15, dup=0.15, reorder=0.2, corrupt=0.05))
    assert_delivered_exactly(net, writes, memory, start)
    s, r = net.req.stats, net.resp.stats
    assert s["retransmitted_packets"] > 0 and r["duplicates"] > 0 and r["sequence_naks"] > 0
    assert r["dropped_bad_frame"] > 0 and s["dropped"] > 0
    assert r["messages_delivered"] == len(writes)


@pytest.mark.parametrize("dead", ["forward", "backward", "both"])
def test_dead_link_ends_in_the_error_state(dead):
    rng = random.Random(5)
    cut_at = 30_000                             # the link dies after the first round trips

    class Dying(Link):
        def send(self, frame, now):
            return [] if now >= cut_at else super().send(frame, now)

    fwd = Dying(rng) if dead in ("forward", "both") else Link(rng)
    back = Dying(rng) if dead in ("backward", "both") else Link(rng)
    start = MOD - 2
    net, writes, memory = run_pair(5, mtu=64, start_psn=start, count=40, max_outstanding=4,
                                   timeout_ns=20_000, retry_limit=3, fwd=fwd, back=back)
    req, resp = net.req, net.resp
    assert req.error is not None and "retry" in req.error
    assert req.next_timer() is None and req.poll(net.now + 10**9) == []
    assert req.stats["timeouts"] == 4          # initial try + 3 retries, then the fourth timeout fails
    done = list(req.completions)
    assert done == list(range(len(done))) and req.failed == list(range(len(done), len(writes)))
    # whatever the responder delivered, it delivered once, in order, and wrote it right
    delivered = list(resp.completions)
    assert delivered == [(va, len(d), imm) for d, va, imm in writes[:len(delivered)]]
    assert len(done) <= len(delivered)
    for data, va, _ in writes[:len(delivered)]:
        assert memory.read(va, len(data)) == data
    # the failure comes (retry_limit + 1) timeouts after the last progress, not later
    assert net.now <= cut_at + 2 * 1000 + 4 * 20_000
