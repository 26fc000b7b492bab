"""Wire formats of RoCE v2, defined once.

Every table here is shared by the RTL (``netreduce.hw``), the golden model (``netreduce.sim``), the host
library (``netreduce.host``) and the testbenches. Fields are listed in network order, most significant
bit first, with their widths in bits; :func:`field_offsets` turns a table into bit offsets within the
header, counted from the first bit on the wire.

Sources: InfiniBand Architecture Specification vol. 1 rel. 1.4 (BTH 9.2, extension headers 9.3, opcodes
table 38), its Annex A17 "RoCEv2" (UDP port 4791, ICRC masking A17.7.3), RFC 791 (IPv4), RFC 8200 (IPv6),
RFC 768 (UDP), IEEE 802.1Q.
"""

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "ROCE_UDP_PORT", "ETHERTYPE_IPV4", "ETHERTYPE_IPV6", "ETHERTYPE_VLAN", "ETH_MIN_FRAME",
    "ETH_HEADER", "VLAN_TAG", "IPV4_HEADER", "IPV6_HEADER", "UDP_HEADER", "BTH", "RETH", "DETH",
    "AETH", "IMMDT", "IETH", "ICRC_BYTES", "field_offsets", "header_bytes",
    "pack_header", "unpack_header",
    "Transport", "OpcodeInfo", "OPCODES", "opcode_info", "EXTENSION_ORDER", "MAX_HEADER_BYTES",
    "PARSED_HEADER_FIELDS", "PAYLOAD_VERDICT_FIELDS",
    "AGG_HEADER", "AGG_MAGIC", "AGG_VERSION", "AGG_HEADER_BYTES", "DTYPE_CODES", "SWITCH_WIDTHS",
    "CONTROL_PACKET", "CONTROL_MAGIC", "CONTROL_VERSION", "CONTROL_PORT", "ControlType", "RESULT_RESENDS",
    "MANAGEMENT_PACKET", "MANAGEMENT_MAGIC", "MANAGEMENT_VERSION", "MANAGEMENT_PORT", "ManagementOp",
    "MANAGEMENT_REPLY", "ManagementAddress",
    "PSN_MODULUS", "psn_distance", "MSG_SEQ_MODULUS", "msg_distance", "GAP_PSN_SHIFT",
    "RC_WRITE_OPCODES", "UC_WRITE_OPCODES", "AethSyndrome", "ETH_FCS_BYTES", "ETH_PREAMBLE_BYTES",
    "ETH_GAP_BYTES", "ETH_LINE_OVERHEAD", "line_bytes",
]

ROCE_UDP_PORT = 4791
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100
ETH_MIN_FRAME = 60      # bytes, without the FCS: shorter frames are padded by the sender
ETH_FCS_BYTES = 4
ETH_PREAMBLE_BYTES = 7  # 0x55 each, then the SFD
ETH_GAP_BYTES = 12      # the inter-frame gap: 96 bit times
# bytes a frame takes on the line besides its own: FCS, preamble and SFD, gap
ETH_LINE_OVERHEAD = ETH_FCS_BYTES + ETH_PREAMBLE_BYTES + 1 + ETH_GAP_BYTES
ICRC_BYTES = 4


def line_bytes(length):
    """The bytes' time a frame of ``length`` bytes (without its FCS) takes on an Ethernet line."""
    return max(length, ETH_MIN_FRAME) + ETH_LINE_OVERHEAD


# --- header tables: (name, width in bits), network order ------------------------------------------

ETH_HEADER = [("dst", 48), ("src", 48), ("ethertype", 16)]
VLAN_TAG = [("tci", 16), ("ethertype", 16)]   # follows the 0x8100 TPID that sits in ETH_HEADER.ethertype
IPV4_HEADER = [
    ("version", 4), ("ihl", 4), ("dscp", 6), ("ecn", 2), ("total_length", 16),
    ("identification", 16), ("flags_fragment", 16), ("ttl", 8), ("protocol", 8), ("checksum", 16),
    ("src", 32), ("dst", 32),
]
IPV6_HEADER = [
    ("version", 4), ("traffic_class", 8), ("flow_label", 20), ("payload_length", 16),
    ("next_header", 8), ("hop_limit", 8), ("src", 128), ("dst", 128),
]
UDP_HEADER = [("sport", 16), ("dport", 16), ("length", 16), ("checksum", 16)]
BTH = [
    ("opcode", 8), ("se", 1), ("migreq", 1), ("pad", 2), ("tver", 4), ("pkey", 16),
    ("fecn", 1), ("becn", 1), ("resv6", 6), ("dest_qp", 24),
    ("ack_req", 1), ("resv7", 7), ("psn", 24),
]
RETH = [("va", 64), ("rkey", 32), ("dma_len", 32)]
DETH = [("qkey", 32), ("resv8", 8), ("src_qp", 24)]
AETH = [("syndrome", 8), ("msn", 24)]
IMMDT = [("immdt", 32)]
IETH = [("rkey", 32)]


def field_offsets(table):
    """``{name: (bit offset from the first bit on the wire, width)}`` for a header table."""
    offsets, position = {}, 0
    for name, width in table:
        offsets[name] = (position, width)
        position += width
    return offsets


def pack_header(table, values):
    """The wire bytes of a header: ``values`` maps field names to ints (missing fields are 0); a value too
    wide for its field raises ``ValueError``."""
    word = 0
    for name, width in table:
        value = values.get(name, 0)
        if not 0 <= value < 1 << width:
            raise ValueError(f"{name}={value} does not fit in {width} bits")
        word = (word << width) | value
    return word.to_bytes(header_bytes(table), "big")


def unpack_header(table, data):
    """``{name: int}`` from the first bytes of ``data`` (network order); ``ValueError`` if it is too short."""
    size = header_bytes(table)
    if len(data) < size:
        raise ValueError(f"a header of {size} bytes does not fit in {len(data)} bytes")
    word = int.from_bytes(data[:size], "big")
    values, shift = {}, size * 8
    for name, width in table:
        shift -= width
        values[name] = (word >> shift) & ((1 << width) - 1)
    return values


def header_bytes(table):
    bits = sum(width for _, width in table)
    assert bits % 8 == 0
    return bits // 8


# --- opcodes -----------------------------------------------------------------------------------------

class Transport(IntEnum):
    """The top three bits of the BTH opcode."""
    RC = 0b000
    UC = 0b001
    RD = 0b010
    UD = 0b011
    CNP = 0b100
    XRC = 0b101


@dataclass(frozen=True)
class OpcodeInfo:
    opcode: int
    name: str
    deth: bool = False
    reth: bool = False
    aeth: bool = False
    immdt: bool = False
    ieth: bool = False
    # AtomicETH (28 bytes) and AtomicAckETH (8 bytes) are not decoded: they travel at the head of the
    # payload stream (see docs/ARCHITECTURE.md, "Parser contract").

    @property
    def transport(self):
        return Transport(self.opcode >> 5)

    @property
    def extension_bytes(self):
        return (header_bytes(DETH) * self.deth + header_bytes(RETH) * self.reth
                + header_bytes(AETH) * self.aeth + header_bytes(IMMDT) * self.immdt
                + header_bytes(IETH) * self.ieth)


# Operation codes shared by RC and UC (IBA table 38); the transport adds 0x00 (RC) or 0x20 (UC).
_SEND_WRITE = [
    (0x00, "SEND_FIRST", {}), (0x01, "SEND_MIDDLE", {}), (0x02, "SEND_LAST", {}),
    (0x03, "SEND_LAST_WITH_IMMEDIATE", {"immdt": True}), (0x04, "SEND_ONLY", {}),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE", {"immdt": True}),
    (0x06, "RDMA_WRITE_FIRST", {"reth": True}), (0x07, "RDMA_WRITE_MIDDLE", {}),
    (0x08, "RDMA_WRITE_LAST", {}), (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", {"immdt": True}),
    (0x0A, "RDMA_WRITE_ONLY", {"reth": True}),
    (0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", {"reth": True, "immdt": True}),
]
_RC_ONLY = [
    (0x0C, "RDMA_READ_REQUEST", {"reth": True}),
    (0x0D, "RDMA_READ_RESPONSE_FIRST", {"aeth": True}), (0x0E, "RDMA_READ_RESPONSE_MIDDLE", {}),
    (0x0F, "RDMA_READ_RESPONSE_LAST", {"aeth": True}), (0x10, "RDMA_READ_RESPONSE_ONLY", {"aeth": True}),
    (0x11, "ACKNOWLEDGE", {"aeth": True}),
    (0x12, "ATOMIC_ACKNOWLEDGE", {"aeth": True}),          # + AtomicAckETH, left in the payload
    (0x13, "COMPARE_SWAP", {}), (0x14, "FETCH_ADD", {}),   # AtomicETH, left in the payload
    (0x16, "SEND_LAST_WITH_INVALIDATE", {"ieth": True}),
    (0x17, "SEND_ONLY_WITH_INVALIDATE", {"ieth": True}),
]


def _build_opcode_table():
    table = {}
    for base, prefix, ops in ((0x00, "RC", _SEND_WRITE + _RC_ONLY), (0x20, "UC", _SEND_WRITE)):
        for code, name, ext in ops:
            table[base | code] = OpcodeInfo(base | code, f"{prefix}_{name}", **ext)
    table[0x64] = OpcodeInfo(0x64, "UD_SEND_ONLY", deth=True)
    table[0x65] = OpcodeInfo(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", deth=True, immdt=True)
    table[0x81] = OpcodeInfo(0x81, "CNP")   # RoCE v2 congestion notification: 16 reserved bytes follow
    return table


OPCODES = _build_opcode_table()

# Order of the extension headers after the BTH (IBA 9.3); ImmDt and IETH never appear together.
EXTENSION_ORDER = ["deth", "reth", "aeth", "immdt", "ieth"]
EXTENSION_TABLES = {"deth": DETH, "reth": RETH, "aeth": AETH, "immdt": IMMDT, "ieth": IETH}


def opcode_info(opcode):
    """The :class:`OpcodeInfo` of a known opcode, or ``None`` (unknown opcodes carry no extensions)."""
    return OPCODES.get(opcode)


MAX_HEADER_BYTES = (header_bytes(ETH_HEADER) + 4 + header_bytes(IPV6_HEADER) + header_bytes(UDP_HEADER)
                    + header_bytes(BTH) + max(info.extension_bytes for info in OPCODES.values()))

# --- the parser's output records ---------------------------------------------------------------------
# One header record per frame (the RTL struct ``hw.stream.ParsedHeader`` and the golden model's dict
# use exactly these names and widths), and the verdicts that ride on the last payload beat.

PARSED_HEADER_FIELDS = [
    # classification
    ("roce", 1),            # IPv4 (IHL 5, unfragmented) or IPv6, UDP, destination port 4791
    ("opcode_known", 1),    # bth_opcode is in OPCODES
    ("hdr_len", 8),         # bytes of the frame taken as header; 0 when roce = 0
    ("payload_len", 16),    # payload bytes without pad, from the IP length; 0 when that is negative
    # Ethernet and 802.1Q
    ("eth_dst", 48), ("eth_src", 48),
    ("vlan_valid", 1), ("vlan_tci", 16),
    ("ethertype", 16),      # the ethertype after the VLAN tag, if any
    # IPv4 or IPv6: ip_version 4 = ethertype 0x0800 with first byte 0x45, 6 = 0x86DD with version 6
    ("ip_version", 4),
    ("ip_dscp", 6), ("ip_ecn", 2),          # IPv6: the traffic class
    ("ip_len", 16),                         # IPv4 total length; IPv6 payload length
    ("ip_id", 16), ("ip_flags_frag", 16),   # IPv4 only
    ("ip_ttl", 8),                          # IPv6: hop limit
    ("ip_proto", 8),                        # IPv6: next header
    ("ip_csum", 16),                        # IPv4 only, as received
    ("ip_flow_label", 20),                  # IPv6 only
    ("ip_src", 128), ("ip_dst", 128),       # IPv4 addresses in the low 32 bits
    # UDP
    ("udp_sport", 16), ("udp_dport", 16), ("udp_len", 16), ("udp_csum", 16),
    # BTH
    ("bth_opcode", 8), ("bth_se", 1), ("bth_migreq", 1), ("bth_pad", 2), ("bth_tver", 4),
    ("bth_pkey", 16), ("bth_fecn", 1), ("bth_becn", 1), ("bth_resv6", 6), ("bth_dest_qp", 24),
    ("bth_ack_req", 1), ("bth_resv7", 7), ("bth_psn", 24),
    # extension headers, each with its presence bit (set from the opcode)
    ("has_deth", 1), ("deth_qkey", 32), ("deth_src_qp", 24),
    ("has_reth", 1), ("reth_va", 64), ("reth_rkey", 32), ("reth_dma_len", 32),
    ("has_aeth", 1), ("aeth_syndrome", 8), ("aeth_msn", 24),
    ("has_immdt", 1), ("immdt", 32),
    ("has_ieth", 1), ("ieth_rkey", 32),
]

PAYLOAD_VERDICT_FIELDS = [
    ("icrc_ok", 1),         # roce, len_ok and the ICRC matches
    ("ipv4_csum_ok", 1),    # ip_version 4 and the 20 header bytes sum to 0xFFFF
    ("len_ok", 1),          # roce = 0, or the frame holds the IP packet and the lengths agree
]


# --- NetReduce's own formats (docs/ARCHITECTURE.md, "Aggregation") ---------------------------------------

# The aggregation header: the first bytes of the payload of a message's first packet.
AGG_HEADER = [
    ("magic", 16), ("version", 8), ("dtype", 8), ("job", 16), ("priority", 8), ("flags", 8),
    ("msg_seq", 32), ("elements", 32),
]
AGG_MAGIC = 0x4E52          # "NR"
AGG_VERSION = 1
AGG_HEADER_BYTES = header_bytes(AGG_HEADER)
DTYPE_CODES = {"fp32": 0, "bf16": 1, "fp16": 2}     # the ``dtype`` field, by netreduce.sim.fp format name
SWITCH_WIDTHS = (64, 256, 512, 1024)     # the datapath bits the switch is built for (``hw.switch.NetReduceSwitch``)

# Control packets between the switch and the hosts' libraries: the UDP payload.
CONTROL_PACKET = [
    ("magic", 16), ("version", 8), ("type", 8), ("job", 16), ("worker", 8), ("reserved", 8),
    ("value", 32),
]
CONTROL_MAGIC = 0x4E43      # "NC"
CONTROL_VERSION = 1
CONTROL_PORT = 4792         # default UDP port (source and destination) of control packets
CONTROL_DSCP = 48           # the IPv4 DSCP of every control packet: CS6, network control (the egress
                            # stage's CONTROL class, queue 0: a CREDIT never waits behind bulk traffic)


class ControlType(IntEnum):
    CREDIT = 1              # switch to host: ``value`` = the highest message sequence number allowed
    CREDIT_REQUEST = 2      # host to switch: please send my CREDIT again
    RESULT_REQUEST = 3      # host to switch (a bounded-loss job's receiver): ``value`` = the msg_seq of a
                            # result it misses; answered from the message's slot while it holds it


# The times a completed bounded-loss message's result is sent again to one receiver, at most (one
# RESULT_REQUEST each; later requests are refused and counted): a request is some 18 times smaller than the
# result it asks for at MTU 1024, so whoever can forge a receiver's requests gets at most this many more
# results toward it per message, not an unbounded stream.
RESULT_RESENDS = 3


# Management packets (the in-band control plane, docs/ARCHITECTURE.md "In-band control plane"): the UDP
# payload of a request from the one manager to the switch's management address, and of the switch's reply.
MANAGEMENT_PACKET = [
    ("magic", 16), ("version", 8), ("op", 8), ("sequence", 16), ("address", 16), ("value", 32),
]
MANAGEMENT_MAGIC = 0x4E4D   # "NM"
MANAGEMENT_VERSION = 1
MANAGEMENT_PORT = 4793      # the switch's UDP port for management requests (its replies come from it)
MANAGEMENT_REPLY = 0x80     # set in ``op`` of a reply


class ManagementOp(IntEnum):
    WRITE = 1               # write ``value`` to the register word at ``address``; the reply echoes both
    READ = 2                # the reply's ``value`` is the word at ``address`` (a configuration word reads 0)


@dataclass(frozen=True)
class ManagementAddress:
    """Who manages a switch, fixed when it is built (the switch's own address registers are written through
    it): the switch's management MAC and IPv4 address, and the one manager it answers (MAC, IPv4 address,
    UDP source port and, if not ``None``, the switch port its requests arrive on). Addresses as ints."""
    switch_mac: int
    switch_ip: int
    manager_mac: int
    manager_ip: int
    manager_port: int
    manager_ingress: int | None = None

    def __post_init__(self):
        for name, bits in (("switch_mac", 48), ("switch_ip", 32), ("manager_mac", 48), ("manager_ip", 32),
                           ("manager_port", 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < 1 << bits:
                raise ValueError(f"management address: {name} {value!r} is not a {bits}-bit number")
        if self.manager_ingress is not None and (not isinstance(self.manager_ingress, int)
                                                 or self.manager_ingress < 0):
            raise ValueError(f"management address: manager_ingress {self.manager_ingress!r} is not a port")


# --- RC transport rules shared by the endpoints and the switch -------------------------------------------

PSN_MODULUS = 1 << 24
MSG_SEQ_MODULUS = 1 << 32      # the aggregation header's msg_seq, compared modulo 2^32 like PSNs modulo 2^24
# A packet after a gap goes on with its PSN this far ahead: the responder still sees a sequence error and
# NAKs, and a copy that a reordering network delivers late can never become the expected PSN (which would
# write a raw contribution into the receiver's memory).
GAP_PSN_SHIFT = 1 << 22


def psn_distance(psn, reference):
    """``psn - reference`` modulo 2^24, as a signed number in [-2^23, 2^23): positive when ``psn`` is
    ahead of ``reference`` (IBA 9.7.2: PSNs compare within half the PSN space)."""
    d = (psn - reference) % PSN_MODULUS
    return d - PSN_MODULUS if d >= PSN_MODULUS // 2 else d


# RC RDMA WRITE opcodes: name -> opcode (IBA table 38)
RC_WRITE_OPCODES = {
    "FIRST": 0x06, "MIDDLE": 0x07, "LAST": 0x08, "LAST_WITH_IMMEDIATE": 0x09,
    "ONLY": 0x0A, "ONLY_WITH_IMMEDIATE": 0x0B,
}


# UC RDMA WRITE opcodes: name -> opcode (IBA table 38: the RC operation codes plus 0x20). The bounded-loss
# class sends every message as one WRITE ONLY with immediate.
UC_WRITE_OPCODES = {name: 0x20 | code for name, code in RC_WRITE_OPCODES.items()}


class AethSyndrome(IntEnum):
    """AETH syndromes (IBA 9.7.5.2.8): the top three bits say ACK (000), RNR NAK (001) or NAK (011)."""
    ACK_NO_CREDIT_LIMIT = 0x1F      # ACK with the "invalid credit" count: no end-to-end flow control
    NAK_PSN_SEQUENCE_ERROR = 0x60
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS_ERROR = 0x62
    NAK_REMOTE_OPERATIONAL_ERROR = 0x63


def msg_distance(seq, reference):
    """``seq - reference`` modulo 2^32, as a signed number in [-2^31, 2^31): message sequence numbers
    compare within half their space, as PSNs do."""
    d = (seq - reference) % MSG_SEQ_MODULUS
    return d - MSG_SEQ_MODULUS if d >= MSG_SEQ_MODULUS // 2 else d
