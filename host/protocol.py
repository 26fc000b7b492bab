"""NetReduce's own formats on the wire: the aggregation header and the control packets.

The field tables are :data:`netreduce.wire.AGG_HEADER` and :data:`netreduce.wire.CONTROL_PACKET`;
docs/ARCHITECTURE.md ("Aggregation", "Wire formats") says what each field means. Everything here is plain
``struct``/``int`` work (no scapy), because the golden model and the emulated workers call it per packet.
"""

import ipaddress
import struct
from dataclasses import asdict, dataclass

from netreduce.host.icrc import ipv4_checksum
from netreduce.wire import (
    AGG_HEADER,
    AGG_MAGIC,
    AGG_VERSION,
    CONTROL_DSCP,
    CONTROL_MAGIC,
    CONTROL_PACKET,
    CONTROL_PORT,
    CONTROL_VERSION,
    DTYPE_CODES,
    ETH_MIN_FRAME,
    ETHERTYPE_IPV4,
    ControlType,
    header_bytes,
    pack_header,
    unpack_header,
)

__all__ = ["AggHeader", "ControlMessage", "build_control_frame", "build_udp_frame", "parse_control_payload",
           "udp_payload", "ip_to_int", "mac_to_int", "DTYPE_NAMES"]

DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
_CONTROL_BYTES = header_bytes(CONTROL_PACKET)


def ip_to_int(address):
    """An IPv4 address (dotted string or int) as an int."""
    return int(ipaddress.IPv4Address(address))


def mac_to_int(address):
    """A MAC address (``aa:bb:..`` string or int) as an int."""
    if isinstance(address, int):
        if not 0 <= address < 1 << 48:
            raise ValueError(f"{address:#x} is not a MAC address")
        return address
    parts = address.split(":")
    if len(parts) != 6:
        raise ValueError(f"{address!r} is not a MAC address")
    return int("".join(f"{int(p, 16):02x}" for p in parts), 16)


@dataclass(frozen=True)
class AggHeader:
    """The aggregation header at the head of a message's first packet."""
    job: int
    msg_seq: int
    elements: int
    dtype: str = "fp32"
    priority: int = 0
    flags: int = 0
    magic: int = AGG_MAGIC
    version: int = AGG_VERSION

    def pack(self):
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        values = asdict(self)
        values["dtype"] = DTYPE_CODES[self.dtype]
        return pack_header(AGG_HEADER, values)

    @classmethod
    def unpack(cls, payload):
        """The header at the head of ``payload``, or ``None`` when the payload is too short, the magic or
        version is wrong or the dtype code is unknown (the switch's ``drop_bad_header`` cases)."""
        try:
            values = unpack_header(AGG_HEADER, payload)
        except ValueError:
            return None
        if (values["magic"] != AGG_MAGIC or values["version"] != AGG_VERSION
                or values["dtype"] not in DTYPE_NAMES):
            return None
        values["dtype"] = DTYPE_NAMES[values["dtype"]]
        return cls(**values)


@dataclass(frozen=True)
class ControlMessage:
    type: ControlType
    job: int
    worker: int
    value: int = 0


def parse_control_payload(payload):
    """The :class:`ControlMessage` in a UDP payload, or ``None`` if it is not a valid one."""
    try:
        values = unpack_header(CONTROL_PACKET, payload)
    except ValueError:
        return None
    if values["magic"] != CONTROL_MAGIC or values["version"] != CONTROL_VERSION:
        return None
    try:
        kind = ControlType(values["type"])
    except ValueError:
        return None
    return ControlMessage(kind, values["job"], values["worker"], values["value"])


def udp_payload(frame, header):
    """The UDP payload of an IPv4 frame without options whose :func:`netreduce.sim.roce_model.parse_frame`
    record is ``header``: after 14 (18 with a VLAN tag) + 20 + 8 bytes of headers, as long as the UDP
    length says (what follows it, such as Ethernet padding, is not part of it)."""
    start = 14 + 4 * header["vlan_valid"] + 20 + 8
    return frame[start:start + max(0, header["udp_len"] - 8)]


_IPV4_UDP = struct.Struct("!BBHHHBBH4s4sHHHH")


def build_control_frame(message, *, src_mac, dst_mac, src_ip, dst_ip, port=CONTROL_PORT):
    """A control packet as an Ethernet frame (:func:`build_udp_frame`, from and to ``port``)."""
    payload = pack_header(CONTROL_PACKET, {
        "magic": CONTROL_MAGIC, "version": CONTROL_VERSION, "type": int(message.type), "job": message.job,
        "worker": message.worker, "value": message.value})
    return build_udp_frame(payload, src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip,
                           sport=port, dport=port)


def build_udp_frame(payload, *, src_mac, dst_mac, src_ip, dst_ip, sport, dport):
    """A frame of NetReduce's own traffic (control and management packets): IPv4 (DSCP ``CONTROL_DSCP``,
    DF, TTL 64, identification 0, checksum computed), UDP with checksum 0, ``payload``, zero padding to
    60 bytes."""
    udp_len = 8 + len(payload)
    ip = bytearray(_IPV4_UDP.pack(0x45, CONTROL_DSCP << 2, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                                  ip_to_int(src_ip).to_bytes(4, "big"), ip_to_int(dst_ip).to_bytes(4, "big"),
                                  sport, dport, udp_len, 0))
    ip[10:12] = ipv4_checksum(ip[:20]).to_bytes(2, "big")
    frame = (mac_to_int(dst_mac).to_bytes(6, "big") + mac_to_int(src_mac).to_bytes(6, "big")
             + ETHERTYPE_IPV4.to_bytes(2, "big") + bytes(ip) + payload)
    return frame + bytes(max(0, ETH_MIN_FRAME - len(frame)))


assert _CONTROL_BYTES == 12
