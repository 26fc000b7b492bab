"""The in-band control plane, host side: management packets to a switch, its replies, and a client that
loads a configuration and reads counters through them (docs/ARCHITECTURE.md, "In-band control plane").

A request is one register operation (:class:`netreduce.wire.ManagementOp`) in the 12-byte UDP payload
:data:`netreduce.wire.MANAGEMENT_PACKET`, from the manager's address to the switch's management address
(UDP port :data:`netreduce.wire.MANAGEMENT_PORT`); the switch answers each request it accepts with one reply,
the same fields with ``op``'s reply bit set and, for a read, the word read. :class:`Manager` numbers its
requests, matches the replies by sequence and sends a request again when its reply does not come; it does
no I/O itself: ``exchange`` (a frame in, the frames that came back out) connects it to the golden model,
and the cocotb testbenches use :meth:`Manager.request` and :meth:`Manager.accept` under their own clock.
"""

from dataclasses import dataclass

from netreduce.host.protocol import build_udp_frame, ip_to_int, mac_to_int
from netreduce.registers import COUNTERS, counter_address
from netreduce.wire import (
    ETHERTYPE_IPV4,
    MANAGEMENT_MAGIC,
    MANAGEMENT_PACKET,
    MANAGEMENT_PORT,
    MANAGEMENT_REPLY,
    MANAGEMENT_VERSION,
    ManagementAddress,
    ManagementOp,
    header_bytes,
    pack_header,
    unpack_header,
)

__all__ = ["ManagementMessage", "ManagementError", "management_address", "build_management_frame",
           "parse_management_payload", "parse_management_reply", "Manager"]

MANAGEMENT_BYTES = header_bytes(MANAGEMENT_PACKET)
_UDP_PAYLOAD_AT = 14 + 20 + 8           # an untagged IPv4 frame without options


class ManagementError(RuntimeError):
    """A request that the switch did not answer, after every retry."""


@dataclass(frozen=True)
class ManagementMessage:
    op: ManagementOp
    sequence: int
    address: int
    value: int = 0
    reply: bool = False


def management_address(*, switch_mac, switch_ip, manager_mac, manager_ip, manager_port=MANAGEMENT_PORT,
                       manager_ingress=None):
    """A :class:`netreduce.wire.ManagementAddress` from MACs and IPv4 addresses as strings or ints."""
    return ManagementAddress(mac_to_int(switch_mac), ip_to_int(switch_ip), mac_to_int(manager_mac),
                             ip_to_int(manager_ip), manager_port, manager_ingress)


def build_management_frame(message, address):
    """``message`` as a frame: a request from the manager to the switch's management address, or (``reply``)
    the switch's reply to the manager."""
    payload = pack_header(MANAGEMENT_PACKET, {
        "magic": MANAGEMENT_MAGIC, "version": MANAGEMENT_VERSION,
        "op": int(message.op) | (MANAGEMENT_REPLY if message.reply else 0), "sequence": message.sequence,
        "address": message.address, "value": message.value})
    manager = dict(mac=address.manager_mac, ip=address.manager_ip, port=address.manager_port)
    switch = dict(mac=address.switch_mac, ip=address.switch_ip, port=MANAGEMENT_PORT)
    source, destination = (switch, manager) if message.reply else (manager, switch)
    return build_udp_frame(payload, src_mac=source["mac"], dst_mac=destination["mac"], src_ip=source["ip"],
                           dst_ip=destination["ip"], sport=source["port"], dport=destination["port"])


def parse_management_payload(payload):
    """The :class:`ManagementMessage` in a UDP payload, or ``None`` if it is not a valid one (length, magic,
    version, op)."""
    if len(payload) < MANAGEMENT_BYTES:
        return None
    values = unpack_header(MANAGEMENT_PACKET, payload[:MANAGEMENT_BYTES])
    if values["magic"] != MANAGEMENT_MAGIC or values["version"] != MANAGEMENT_VERSION:
        return None
    try:
        op = ManagementOp(values["op"] & ~MANAGEMENT_REPLY)
    except ValueError:
        return None
    return ManagementMessage(op, values["sequence"], values["address"], values["value"],
                             reply=bool(values["op"] & MANAGEMENT_REPLY))


def parse_management_reply(frame, address):
    """The reply in ``frame`` if it is one from the switch of ``address`` to its manager, else ``None``."""
    if len(frame) < _UDP_PAYLOAD_AT + MANAGEMENT_BYTES:
        return None
    to_manager = (int.from_bytes(frame[0:6], "big") == address.manager_mac
                  and int.from_bytes(frame[6:12], "big") == address.switch_mac
                  and int.from_bytes(frame[12:14], "big") == ETHERTYPE_IPV4 and frame[14] == 0x45
                  and frame[23] == 17 and int.from_bytes(frame[26:30], "big") == address.switch_ip
                  and int.from_bytes(frame[30:34], "big") == address.manager_ip
                  and int.from_bytes(frame[34:36], "big") == MANAGEMENT_PORT
                  and int.from_bytes(frame[36:38], "big") == address.manager_port)
    if not to_manager:
        return None
    message = parse_management_payload(frame[_UDP_PAYLOAD_AT:])
    return message if message is not None and message.reply else None


class Manager:
    """Register operations on the switch of ``address`` (a :class:`netreduce.wire.ManagementAddress`).

    ``exchange(frame)``: sends a request frame and returns the frames that came back (any of them, replies
    or not), for :meth:`write`, :meth:`read`, :meth:`load` and :meth:`counters`; a request whose reply does
    not come is sent again, ``retries`` times, then :class:`ManagementError`."""

    def __init__(self, address, exchange=None, *, retries=3):
        self.address, self.exchange, self.retries = address, exchange, retries
        self.sequence = 0
        self.sent = 0           # request frames sent, retries included

    def request(self, op, register, value=0):
        """The next request: ``(sequence, frame)``."""
        self.sequence = (self.sequence + 1) & 0xFFFF
        message = ManagementMessage(ManagementOp(op), self.sequence, register, value)
        return self.sequence, build_management_frame(message, self.address)

    def accept(self, frame, sequence):
        """The reply to request ``sequence`` in ``frame``, or ``None``."""
        reply = parse_management_reply(frame, self.address)
        return reply if reply is not None and reply.sequence == sequence else None

    def _call(self, op, register, value=0):
        if self.exchange is None:
            raise ManagementError("this Manager has no exchange: use request() and accept()")
        sequence, frame = self.request(op, register, value)
        for _ in range(1 + self.retries):
            self.sent += 1
            for answer in self.exchange(frame):
                reply = self.accept(answer, sequence)
                if reply is not None:
                    return reply
        raise ManagementError(f"no reply to {ManagementOp(op).name} {register:#06x} after {1 + self.retries} "
                              f"requests (is the management address right?)")

    def write(self, register, value):
        self._call(ManagementOp.WRITE, register, value)

    def read(self, register):
        return self._call(ManagementOp.READ, register).value

    def load(self, writes):
        """Every ``(address, word)`` of ``writes`` (such as :func:`netreduce.registers.switch_config_writes`),
        in order."""
        for register, value in writes:
            self.write(register, value)

    def counters(self):
        """Every counter of ``netreduce.registers.COUNTERS``, by name."""
        return {name: self.read(counter_address(name)) for name in COUNTERS}
