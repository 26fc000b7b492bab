"""The host packet library: scapy layers against real captures, builders, ICRC, pcap."""

import ipaddress
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Padding, Raw
from scapy.utils import rdpcap

from netreduce.host import icrc as icrc_mod
from netreduce.host.icrc import compute_icrc, fix_icrc, icrc_ok, ipv4_checksum
from netreduce.host.packets import (
    AETH,
    BTH,
    DETH,
    IETH,
    RETH,
    CNPPadding,
    ImmDt,
    build_ack,
    build_cnp,
    build_roce_frame,
    dissect,
    roce_packet,
)
from netreduce.host.pcap import read_pcap, read_pcap_timed, write_pcap
from netreduce.host.strategies import KNOWN_OPCODES, UNKNOWN_OPCODES, roce_frames_with_args

from references import CAPTURES, capture_files, extensions_of, ones_complement_sum

CAPTURE_FILES = capture_files()


def _id(path):
    return str(path.relative_to(CAPTURES))


def _bad_icrc_file(path):
    return "icrc_bad" in path.relative_to(CAPTURES).parts


# Independent, first-principles helpers (deliberately not the library's) -------------------------------

LAYER_OF = {"deth": DETH, "reth": RETH, "aeth": AETH, "immdt": ImmDt, "ieth": IETH}
EXT_BYTES = {"deth": 8, "reth": 16, "aeth": 4, "immdt": 4, "ieth": 4}






def is_roce_udp(frame):
    """IPv4 (IHL 5) / UDP / port 4791 without VLAN, as every capture frame is."""
    return (frame[12:14] == b"\x08\x00" and frame[14] == 0x45 and frame[23] == 17
            and frame[36:38] == (4791).to_bytes(2, "big"))


def layers_after(layer):
    out = []
    layer = layer.payload
    while layer and not isinstance(layer, Padding):
        out.append(layer)
        layer = layer.payload
    return out


# --- captures ------------------------------------------------------------------------------------------

def test_captures_present():
    names = {_id(path) for path in CAPTURE_FILES}
    assert any(name.startswith("icrc_bad") for name in names)
    assert len(names) >= 11


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=_id)
def test_capture_dissects_fully_and_reserializes(path):
    frames = read_pcap(path)
    assert frames
    roce_count = 0
    for index, frame in enumerate(frames):
        packet = dissect(frame)
        assert bytes(packet) == frame, f"frame {index} does not re-serialize"
        if not is_roce_udp(frame):
            assert BTH not in packet
            continue
        roce_count += 1
        total_length = int.from_bytes(frame[16:18], "big")
        assert total_length + 14 == len(frame)
        bth = packet[BTH]
        assert isinstance(bth.underlayer, UDP)
        opcode = frame[42]
        assert bth.opcode == opcode
        chain = layers_after(bth)
        names = extensions_of(opcode)
        # the extension headers, in wire order, then the payload (Raw, or CNPPadding for a CNP)
        assert [type(layer) for layer in chain[:len(names)]] == [LAYER_OF[n] for n in names], (index, chain)
        rest = chain[len(names):]
        assert all(type(layer) in (Raw, CNPPadding) for layer in rest), (index, rest)
        assert len(rest) <= 2
        payload_and_pad = b"".join(layer.self_build() if type(layer) is CNPPadding else layer.load
                                   for layer in rest)
        ext_len = sum(EXT_BYTES[n] for n in names)
        start = 14 + 20 + 8 + 12 + ext_len
        assert payload_and_pad == frame[start:len(frame) - 4]
        # scapy's trailer field holds the ICRC, read big-endian from the wire bytes
        assert bth.icrc == int.from_bytes(frame[-4:], "big")
        # field values land where the IBA puts them
        assert bth.psn == int.from_bytes(frame[51:54], "big")
        assert bth.dqpn == int.from_bytes(frame[47:50], "big")
        assert bth.padcount == (frame[43] >> 4) & 3
        if "reth" in names:
            base = 54 + (8 if "deth" in names else 0)
            reth = packet[RETH]
            assert (reth.va, reth.rkey, reth.dma_len) == struct.unpack("!QII", frame[base:base + 16])
        if "deth" in names:
            deth = packet[DETH]
            assert deth.qkey == int.from_bytes(frame[54:58], "big")
            assert deth.src_qp == int.from_bytes(frame[59:62], "big")
        if "aeth" in names:
            aeth = packet[AETH]
            assert aeth.syndrome == frame[54] and aeth.msn == int.from_bytes(frame[55:58], "big")
    assert roce_count > 0


def test_capture_opcode_census():
    """The opcodes the captures README lists are all there, and decode with the right extension headers."""
    seen = {}
    for path in CAPTURE_FILES:
        for frame in read_pcap(path):
            if is_roce_udp(frame):
                seen[frame[42]] = seen.get(frame[42], 0) + 1
    # RC SEND FIRST/MIDDLE/LAST/ONLY, RC WRITE ONLY, READ REQUEST, READ RESPONSE ONLY, ACK, UC SEND
    # FIRST/LAST/ONLY, UD SEND ONLY, CNP
    for opcode in (0x00, 0x01, 0x02, 0x04, 0x0A, 0x0C, 0x10, 0x11, 0x20, 0x22, 0x24, 0x64, 0x81):
        assert opcode in seen, hex(opcode)


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=_id)
def test_capture_icrc_verdicts(path):
    bad_file = _bad_icrc_file(path)
    for index, frame in enumerate(read_pcap(path)):
        if not is_roce_udp(frame):
            assert not icrc_ok(frame)
            with pytest.raises(ValueError):
                compute_icrc(frame)
            continue
        assert icrc_ok(frame) is (not bad_file), f"frame {index}"
        # an independent oracle: scapy's own ICRC computation
        packet = Ether(frame)
        assert packet[BTH].compute_icrc(None) == compute_icrc(frame)
        fixed = fix_icrc(frame)
        assert icrc_ok(fixed)
        assert fixed[:-4] == frame[:-4]
        assert (fixed == frame) is (not bad_file)


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=_id)
def test_capture_ipv4_checksums(path):
    for frame in read_pcap(path):
        if frame[12:14] == b"\x08\x00" and frame[14] >> 4 == 4:
            header = frame[14:14 + (frame[14] & 15) * 4]
            assert ipv4_checksum(header) == int.from_bytes(header[10:12], "big")
            assert ones_complement_sum(header) == 0xFFFF


def test_icrc_rule_by_hand():
    """The first capture frame's ICRC from the Annex A17 rule written out here, on a masked copy."""
    path = CAPTURES / "soft-roce-02-2-write-ibdump-write.pcap"
    frame = read_pcap(path)[0]
    masked = bytearray(frame[14:-4])
    masked[1] = masked[8] = 0xFF           # TOS, TTL
    masked[10:12] = b"\xff\xff"            # header checksum
    masked[26:28] = b"\xff\xff"            # UDP checksum
    masked[32] = 0xFF                      # BTH FECN/BECN/resv6
    assert zlib.crc32(b"\xff" * 8 + masked).to_bytes(4, "little") == frame[-4:]
    assert compute_icrc(frame) == frame[-4:]


# --- ICRC: masked fields, VLAN, IPv6, Ethernet padding ---------------------------------------------------

@pytest.mark.parametrize("ipv6", [False, True])
@pytest.mark.parametrize("vlan", [None, 7])
def test_icrc_ignores_masked_fields_only(ipv6, vlan):
    base = dict(ipv6=ipv6, vlan=vlan, psn=5, dest_qp=9, reth=(1, 2, 3))
    frame = build_roce_frame(0x0A, b"abcdefgh", **base)
    assert icrc_ok(frame)
    reference = compute_icrc(frame)
    # the ICRC does not cover Ethernet: with or without a tag, any MACs, the same ICRC
    other = build_roce_frame(0x0A, b"abcdefgh", **dict(base, vlan=None if vlan else 3, eth_src=5))
    assert compute_icrc(other) == reference
    # variant fields: same ICRC
    variants = [dict(ttl=1), dict(dscp=46, ecn=3), dict(udp_csum=0x1234), dict(fecn=1, becn=1, resv6=0x3F)]
    if ipv6:
        variants.append(dict(flow_label=0xABCDE))
    for change in variants:
        assert compute_icrc(build_roce_frame(0x0A, b"abcdefgh", **dict(base, **change))) == reference, change
    # invariant fields: a different ICRC
    for change in [dict(psn=6), dict(dest_qp=8), dict(pkey=0x7FFF), dict(sport=1), dict(resv7=1),
                   dict(reth=(1, 2, 4)), dict(migreq=1)]:
        assert compute_icrc(build_roce_frame(0x0A, b"abcdefgh", **dict(base, **change))) != reference, change
    assert compute_icrc(build_roce_frame(0x0A, b"abcdefgi", **base)) != reference


def test_icrc_position_from_ip_length():
    frame = build_roce_frame(0x04, b"")                  # 58 bytes of IP packet, then 2 bytes of padding
    assert len(frame) == 60 and frame[-2:] == b"\x00\x00"
    assert icrc_ok(frame)
    assert icrc_ok(frame[:-2] + b"\xde\xad")             # padding content does not matter
    assert not icrc_ok(frame[:-3])                       # the frame no longer holds the IP packet
    corrupted = bytearray(frame)
    corrupted[-3] ^= 1                                   # last ICRC byte
    assert not icrc_ok(bytes(corrupted))
    assert fix_icrc(bytes(corrupted)) == frame


def test_icrc_rejects_non_roce():
    for frame in [b"", bytes(60), bytes(Ether() / IP() / UDP(sport=1, dport=4791)),
                  bytes(Ether() / IPv6() / Raw(b"x" * 40))]:
        assert not icrc_ok(frame)
        with pytest.raises(ValueError):
            compute_icrc(frame)


def test_ipv4_checksum_known_answer():
    # RFC 1071 style example: a header whose checksum is 0xB861
    header = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ipv4_checksum(header) == 0xB861
    assert icrc_mod.ipv4_checksum_ok(header[:10] + b"\xb8\x61" + header[12:])
    with pytest.raises(ValueError):
        ipv4_checksum(b"\x45" * 19)


# --- builders --------------------------------------------------------------------------------------------

def _ip_of(args):
    return "ipv6" if args["ipv6"] else "ipv4"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roce_frames_with_args())
def test_built_frames_dissect_to_their_arguments(case):
    args, frame = case
    payload = args["payload"]
    pad = args.get("pad", -len(payload) % 4)
    names = extensions_of(args["opcode"])
    o = 18 if "vlan" in args else 14
    u = o + (40 if args["ipv6"] else 20)
    header = u + 8 + 12 + sum(EXT_BYTES[n] for n in names)
    ip_end = header + len(payload) + pad + 4
    assert len(frame) == max(60, ip_end)
    assert frame[ip_end:] == bytes(len(frame) - ip_end)
    assert icrc_ok(frame)                                        # ours agrees with scapy's ICRC
    packet = dissect(frame)
    assert bytes(packet) == frame
    assert int(packet[Ether].dst.replace(":", ""), 16) == args["eth_dst"]
    assert int(packet[Ether].src.replace(":", ""), 16) == args["eth_src"]
    if "vlan" in args:
        tag = packet[Dot1Q]
        assert (tag.vlan, tag.prio, tag.dei) == (args["vlan"], args["vlan_pcp"], args["vlan_dei"])
    else:
        assert Dot1Q not in packet
    if args["ipv6"]:
        ip = packet[IPv6]
        assert (ip.tc, ip.fl, ip.hlim, ip.nh) == ((args["dscp"] << 2) | args["ecn"], args["flow_label"],
                                                  args["ttl"], 17)
        assert ip.plen == ip_end - u
    else:
        ip = packet[IP]
        assert ones_complement_sum(frame[o:o + 20]) == 0xFFFF
        assert (ip.tos, ip.ttl, ip.id, int(ip.flags), ip.frag, ip.proto) == (
            (args["dscp"] << 2) | args["ecn"], args["ttl"], args["ip_id"], args["ip_flags"], 0, 17)
        assert ip.len == ip_end - o
    assert ipaddress.ip_address(ip.src) == ipaddress.ip_address(args["src_ip"])
    assert ipaddress.ip_address(ip.dst) == ipaddress.ip_address(args["dst_ip"])
    udp = packet[UDP]
    assert (udp.sport, udp.dport, udp.chksum) == (args["sport"], 4791, args["udp_csum"])
    assert udp.len == ip_end - u
    bth = packet[BTH]
    assert (bth.opcode, bth.solicited, bth.migreq, bth.padcount, bth.version, bth.pkey) == (
        args["opcode"], args["se"], args["migreq"], pad, args["tver"], args["pkey"])
    assert (bth.fecn, bth.becn, bth.resv6, bth.dqpn, bth.ackreq, bth.resv7, bth.psn) == (
        args["fecn"], args["becn"], args["resv6"], args["dest_qp"], args["ack_req"], args["resv7"], args["psn"])
    chain = layers_after(bth)
    assert [type(layer) for layer in chain[:len(names)]] == [LAYER_OF[n] for n in names]
    for name, layer in zip(names, chain, strict=False):
        if name == "deth":
            assert (layer.qkey, layer.reserved, layer.src_qp) == (*args["deth"][:1], 0, args["deth"][1])
        elif name == "reth":
            assert (layer.va, layer.rkey, layer.dma_len) == args["reth"]
        elif name == "aeth":
            assert (layer.syndrome, layer.msn) == args["aeth"]
        elif name == "immdt":
            assert layer.immdt == args["immdt"]
        else:
            assert layer.rkey == args["ieth"]
    assert frame[header:ip_end - 4] == payload + bytes([args["pad_byte"]]) * pad


@pytest.mark.parametrize("opcode", KNOWN_OPCODES + UNKNOWN_OPCODES[:8] + (0xFF,))
def test_every_opcode_builds_and_dissects(opcode):
    frame = build_roce_frame(opcode, b"\x11" * 5)
    assert icrc_ok(frame)
    packet = dissect(frame)
    assert bytes(packet) == frame
    names = extensions_of(opcode)
    assert [type(layer) for layer in layers_after(packet[BTH])[:len(names)]] == [LAYER_OF[n] for n in names]


def test_builder_rejects_bad_arguments():
    with pytest.raises(ValueError):
        build_roce_frame(0x04, reth=(0, 0, 0))          # SEND ONLY carries no RETH
    with pytest.raises(ValueError):
        build_roce_frame(0x04, psn=1 << 24)
    with pytest.raises(ValueError):
        build_roce_frame(0x04, pad=4)
    with pytest.raises(ValueError):
        build_roce_frame(0x04, ipv6=True, src_ip="10.0.0.1")


def test_builder_overrides_and_helpers():
    frame = build_roce_frame(0x04, b"abcd", icrc=b"\x01\x02\x03\x04")
    assert frame[-4:] == b"\x01\x02\x03\x04" and not icrc_ok(frame)
    frame = build_roce_frame(0x04, b"abcd", ipv4_csum=0x1234)
    assert frame[24:26] == b"\x12\x34" and icrc_ok(frame)      # the ICRC masks the checksum
    frame = build_roce_frame(0x04, b"abcd", udp_len=7, ip_len=300)
    assert frame[38:40] == (7).to_bytes(2, "big") and frame[16:18] == (300).to_bytes(2, "big")
    ack = dissect(build_ack(psn=77, msn=3, syndrome=0x60))
    assert ack[BTH].opcode == 0x11 and ack[BTH].psn == 77 and (ack[AETH].syndrome, ack[AETH].msn) == (0x60, 3)
    cnp = build_cnp(0x1234)
    assert len(cnp) == 14 + 20 + 8 + 12 + 16 + 4 and icrc_ok(cnp)
    assert Ether(cnp)[BTH].becn == 1 and CNPPadding in Ether(cnp)
    assert bytes(roce_packet(0x04, b"abcd")) == build_roce_frame(0x04, b"abcd")


# --- pcap ------------------------------------------------------------------------------------------------

def test_pcap_round_trip(tmp_path):
    frames = read_pcap(CAPTURE_FILES[0]) + [build_roce_frame(0x0A, b"x" * 100, vlan=5, ipv6=True, reth=(1, 2, 100))]
    path = tmp_path / "out.pcap"
    write_pcap(path, frames, timestamps=[1.5 + i for i in range(len(frames))])
    raw = path.read_bytes()
    magic, major, minor, _, _, _, linktype = struct.unpack("<IHHiIII", raw[:24])
    assert (magic, major, minor, linktype) == (0xA1B2C3D4, 2, 4, 1)
    assert read_pcap(path) == frames
    timed = read_pcap_timed(path)
    assert [round(stamp, 6) for stamp, _ in timed] == [1.5 + i for i in range(len(frames))]
    assert [bytes(packet) for packet in rdpcap(str(path))] == frames       # scapy reads it too
    write_pcap(path, [])
    assert read_pcap(path) == []


def test_pcap_rejects_other_link_types(tmp_path):
    path = tmp_path / "raw.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)
                     + struct.pack("<IIII", 0, 0, 4, 4) + b"\x45\x00\x00\x04")
    with pytest.raises(ValueError):
        read_pcap(path)


@given(st.lists(st.binary(min_size=1, max_size=200), max_size=10))
@settings(max_examples=30, deadline=None)
def test_pcap_round_trip_any_bytes(frames):
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.pcap"
        write_pcap(path, frames)
        assert read_pcap(path) == frames
