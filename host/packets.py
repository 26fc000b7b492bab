"""RoCE v2 packets on scapy: the missing extension-header layers, their bindings, and frame builders.

``scapy.contrib.roce`` has BTH, AETH and the CNP padding, and keeps the ICRC as a trailer field of the BTH
(``BTH.icrc``, read big-endian from the 4 last bytes of the UDP payload; the wire order is little-endian).
This module adds RETH, ImmDt, DETH and IETH and binds every extension header under the BTH by opcode, as
:data:`netreduce.wire.OPCODES` says, in wire order (DETH, RETH, AETH, ImmDt or IETH). A dissected RoCE v2
frame reads ``Ether / [Dot1Q] / IP|IPv6 / UDP / BTH / extension headers / Raw`` (payload and pad bytes),
with the ICRC in ``BTH.icrc`` and any Ethernet padding in a trailing ``Padding`` layer.

The builders return complete frames as bytes: Ethernet II, optional 802.1Q tag, IPv4 (header checksum
computed) or IPv6, UDP to port 4791 from an explicit source port, BTH, extension headers, payload, pad,
ICRC (computed by scapy's BTH layer), then zero Ethernet padding up to 60 bytes. Keyword arguments can
override every length, checksum and the ICRC, to make malformed frames on purpose.
"""

import ipaddress

from scapy.config import conf
from scapy.contrib.roce import AETH, BTH, CNPPadding  # noqa: F401 (re-exported)
from scapy.fields import IntField, XBitField, XByteField, XIntField, XLongField
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, Raw, bind_bottom_up

from netreduce.wire import ETH_MIN_FRAME, EXTENSION_ORDER, OPCODES, ROCE_UDP_PORT

__all__ = [
    "BTH", "AETH", "CNPPadding", "RETH", "ImmDt", "DETH", "IETH", "EXTENSION_LAYERS", "extension_layers",
    "roce_packet", "build_roce_frame", "build_ack", "build_cnp", "dissect", "CNP_OPCODE",
    "DEFAULT_ETH_SRC", "DEFAULT_ETH_DST", "DEFAULT_IPV4_SRC", "DEFAULT_IPV4_DST", "DEFAULT_IPV6_SRC",
    "DEFAULT_IPV6_DST", "DEFAULT_UDP_SPORT",
]

CNP_OPCODE = 0x81


class _RoceExtension(Packet):
    """An extension header after the BTH: the next layer follows from the BTH opcode, not from this layer."""

    def guess_payload_class(self, payload):
        bth = self.underlayer
        while bth is not None and not isinstance(bth, BTH):
            bth = bth.underlayer
        if bth is not None:
            chain = extension_layers(bth.opcode)
            if type(self) in chain:
                position = chain.index(type(self))
                if position + 1 < len(chain):
                    return chain[position + 1]
        return conf.raw_layer


class RETH(_RoceExtension):
    """RDMA extended transport header (IBA 9.3.3): virtual address, R_Key, DMA length."""
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]


class ImmDt(_RoceExtension):
    """Immediate data (IBA 9.3.5)."""
    name = "ImmDt"
    fields_desc = [XIntField("immdt", 0)]


class DETH(_RoceExtension):
    """Datagram extended transport header (IBA 9.3.2): Q_Key, reserved byte, source QP."""
    name = "DETH"
    fields_desc = [XIntField("qkey", 0), XByteField("reserved", 0), XBitField("src_qp", 0, 24)]


class IETH(_RoceExtension):
    """Invalidate extended transport header (IBA 9.3.7): the R_Key to invalidate."""
    name = "IETH"
    fields_desc = [XIntField("rkey", 0)]


# scapy's own AETH (scapy.contrib.roce) is reused; it is always the last extension header of its opcodes.
EXTENSION_LAYERS = {"deth": DETH, "reth": RETH, "aeth": AETH, "immdt": ImmDt, "ieth": IETH}


def extension_layers(opcode):
    """The scapy layer classes of the extension headers ``opcode`` carries, in wire order ([] if unknown)."""
    info = OPCODES.get(opcode)
    if info is None:
        return []
    return [EXTENSION_LAYERS[name] for name in EXTENSION_ORDER if getattr(info, name)]


def _bind():
    for code in OPCODES:
        chain = extension_layers(code)
        if chain:
            assert AETH not in chain[:-1], "scapy's AETH layer cannot be followed by another header"
            # bottom-up only: building BTH()/RETH() must not rewrite an explicit opcode
            bind_bottom_up(BTH, chain[0], opcode=code)


_bind()

# --- builders ------------------------------------------------------------------------------------------

DEFAULT_ETH_SRC = "02:00:00:00:00:01"
DEFAULT_ETH_DST = "02:00:00:00:00:02"
DEFAULT_IPV4_SRC = "10.0.0.1"
DEFAULT_IPV4_DST = "10.0.0.2"
DEFAULT_IPV6_SRC = "fd00::1"
DEFAULT_IPV6_DST = "fd00::2"
DEFAULT_UDP_SPORT = 49152


def _check(name, value, bits):
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise ValueError(f"{name} must be an integer in 0..{(1 << bits) - 1}, not {value!r}")
    return value


def _mac(value):
    if isinstance(value, int):
        _check("MAC address", value, 48)
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    return value


def _ip(value, version):
    if isinstance(value, int):
        return str(ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value))
    address = ipaddress.ip_address(value)
    if address.version != version:
        raise ValueError(f"{value!r} is not an IPv{version} address")
    return str(address)


def roce_packet(opcode, payload=b"", *,
                eth_dst=DEFAULT_ETH_DST, eth_src=DEFAULT_ETH_SRC,
                vlan=None, vlan_pcp=0, vlan_dei=0,
                ipv6=False, src_ip=None, dst_ip=None, dscp=0, ecn=0, ttl=64,
                ip_id=0, ip_flags=0b010, ip_frag=0, ip_options=b"", flow_label=0,
                sport=DEFAULT_UDP_SPORT, dport=ROCE_UDP_PORT, udp_csum=0,
                se=0, migreq=0, tver=0, pkey=0xFFFF, fecn=0, becn=0, resv6=0, dest_qp=0,
                ack_req=0, resv7=0, psn=0,
                deth=None, reth=None, aeth=None, immdt=None, ieth=None,
                pad=None, pad_byte=0,
                ip_len=None, udp_len=None, ipv4_csum=None, icrc=None):
    """A RoCE v2 packet as a scapy :class:`Ether` stack (no Ethernet padding).

    ``opcode`` may be any byte; the extension headers are those :data:`netreduce.wire.OPCODES` gives it
    (none for an unknown opcode). Their values: ``deth=(qkey, src_qp)``, ``reth=(va, rkey, dma_len)``,
    ``aeth=(syndrome, msn)``, ``immdt=value``, ``ieth=rkey``; addresses are strings or ints; a header the
    opcode carries defaults to zeros, and giving one it does not carry is an error. ``pad`` (0..3 bytes of
    value ``pad_byte``, written in the BTH pad count) defaults to what makes payload plus pad a multiple of
    4. ``vlan`` is the VLAN id (``None``: untagged). ``ip_flags`` is the 3-bit IPv4 flags field (default
    DF). ``ip_len`` (IPv4 total length or IPv6 payload length), ``udp_len``, ``ipv4_csum`` and ``icrc`` (4
    bytes in wire order, or an int stored least significant byte first) override the computed values.
    """
    _check("opcode", opcode, 8)
    payload = bytes(payload)
    if pad is None:
        pad = -len(payload) % 4
    _check("pad", pad, 2)

    layers = Ether(dst=_mac(eth_dst), src=_mac(eth_src))
    if vlan is not None:
        layers = layers / Dot1Q(prio=_check("vlan_pcp", vlan_pcp, 3), dei=_check("vlan_dei", vlan_dei, 1),
                                vlan=_check("vlan", vlan, 12))
    if ipv6:
        if ip_options:
            raise ValueError("ip_options is for IPv4")
        tc = (_check("dscp", dscp, 6) << 2) | _check("ecn", ecn, 2)
        ip = IPv6(tc=tc, fl=_check("flow_label", flow_label, 20), hlim=_check("ttl", ttl, 8), nh=17,
                  src=_ip(DEFAULT_IPV6_SRC if src_ip is None else src_ip, 6),
                  dst=_ip(DEFAULT_IPV6_DST if dst_ip is None else dst_ip, 6))
        if ip_len is not None:
            ip.plen = _check("ip_len", ip_len, 16)
    else:
        tos = (_check("dscp", dscp, 6) << 2) | _check("ecn", ecn, 2)
        ip = IP(tos=tos, id=_check("ip_id", ip_id, 16), flags=_check("ip_flags", ip_flags, 3),
                frag=_check("ip_frag", ip_frag, 13), ttl=_check("ttl", ttl, 8), proto=17,
                src=_ip(DEFAULT_IPV4_SRC if src_ip is None else src_ip, 4),
                dst=_ip(DEFAULT_IPV4_DST if dst_ip is None else dst_ip, 4))
        if ip_options:
            if len(ip_options) % 4 or len(ip_options) > 40:
                raise ValueError("IPv4 options are a multiple of 4 bytes, at most 40")
            ip.options = [IPOption(bytes(ip_options))]
        if ip_len is not None:
            ip.len = _check("ip_len", ip_len, 16)
        if ipv4_csum is not None:
            ip.chksum = _check("ipv4_csum", ipv4_csum, 16)
    if ipv4_csum is not None and ipv6:
        raise ValueError("ipv4_csum is for IPv4")
    udp = UDP(sport=_check("sport", sport, 16), dport=_check("dport", dport, 16),
              chksum=_check("udp_csum", udp_csum, 16))
    if udp_len is not None:
        udp.len = _check("udp_len", udp_len, 16)

    bth = BTH(opcode=opcode, solicited=_check("se", se, 1), migreq=_check("migreq", migreq, 1),
              padcount=pad, version=_check("tver", tver, 4), pkey=_check("pkey", pkey, 16),
              fecn=_check("fecn", fecn, 1), becn=_check("becn", becn, 1), resv6=_check("resv6", resv6, 6),
              dqpn=_check("dest_qp", dest_qp, 24), ackreq=_check("ack_req", ack_req, 1),
              resv7=_check("resv7", resv7, 7), psn=_check("psn", psn, 24))
    if icrc is not None:
        if isinstance(icrc, int):
            icrc = _check("icrc", icrc, 32).to_bytes(4, "little")
        if len(icrc) != 4:
            raise ValueError("icrc is 4 bytes")
        bth.icrc = int.from_bytes(icrc, "big")     # scapy reads and writes the trailer big-endian

    given = {"deth": deth, "reth": reth, "aeth": aeth, "immdt": immdt, "ieth": ieth}
    carried = {name for name, cls in EXTENSION_LAYERS.items() if cls in extension_layers(opcode)}
    for name, value in given.items():
        if value is not None and name not in carried:
            raise ValueError(f"opcode 0x{opcode:02x} does not carry {name.upper()}")
    stack = layers / ip / udp / bth
    for name in EXTENSION_ORDER:
        if name not in carried:
            continue
        value = given[name]
        if name == "deth":
            qkey, src_qp = value or (0, 0)
            stack = stack / DETH(qkey=_check("qkey", qkey, 32), src_qp=_check("src_qp", src_qp, 24))
        elif name == "reth":
            va, rkey, dma_len = value or (0, 0, 0)
            stack = stack / RETH(va=_check("va", va, 64), rkey=_check("rkey", rkey, 32),
                                 dma_len=_check("dma_len", dma_len, 32))
        elif name == "aeth":
            syndrome, msn = value or (0, 0)
            stack = stack / AETH(syndrome=_check("syndrome", syndrome, 8), msn=_check("msn", msn, 24))
        elif name == "immdt":
            stack = stack / ImmDt(immdt=_check("immdt", value or 0, 32))
        else:
            stack = stack / IETH(rkey=_check("ieth", value or 0, 32))
    body = payload + bytes([_check("pad_byte", pad_byte, 8)]) * pad
    if body:
        stack = stack / Raw(body)
    return stack


def build_roce_frame(opcode, payload=b"", *, eth_pad=True, **fields):
    """A complete RoCE v2 frame as bytes: :func:`roce_packet` serialized, then zero Ethernet padding up to
    60 bytes (unless ``eth_pad`` is false). Keyword arguments are those of :func:`roce_packet`."""
    frame = bytes(roce_packet(opcode, payload, **fields))
    if eth_pad and len(frame) < ETH_MIN_FRAME:
        frame += bytes(ETH_MIN_FRAME - len(frame))
    return frame


def build_ack(psn, msn, syndrome=0, **fields):
    """An RC ACKNOWLEDGE (ACK when ``syndrome`` is 0; NAK codes per IBA 9.7.5.2.8)."""
    return build_roce_frame(0x11, b"", psn=psn, aeth=(syndrome, msn), **fields)


def build_cnp(dest_qp, **fields):
    """A RoCE v2 congestion notification packet: BECN set, 16 reserved bytes of payload."""
    fields.setdefault("becn", 1)
    return build_roce_frame(CNP_OPCODE, bytes(16), dest_qp=dest_qp, **fields)


def dissect(frame):
    """scapy's dissection of an Ethernet frame (with this module's layers bound)."""
    return Ether(bytes(frame))
