"""Attacks on the switch's trust boundary, as traffic added to an emulated all-reduce.

docs/ARCHITECTURE.md ("Trust model") lists what a host on a port can try and what the switch does about
it. Each attack here is a ``setup(network)`` function (keyword options after the network) for a
:class:`~netreduce.host.network.Network` of :func:`~netreduce.host.network.build_allreduce`: call it
before :meth:`Network.run <netreduce.host.network.Network.run>`, or hand it to
``netreduce.tb.scenarios.record(setup=..., **build_allreduce_kwargs)`` to record the traffic on the golden
model and replay it into the RTL. ``functools.partial`` gives the variants.

The attackers are as strong as the emulation allows: they read the golden model's state (the next PSN the
switch expects, the newest result it sent: ``network.engine`` must be a
:class:`~netreduce.host.network.ModelEngine`), and they see every frame as it leaves the switch
(``network.taps``). An attacker sends from a host of its own, one of ``network.extra_hosts``
(``build_allreduce(extra_hosts=[attacker(port)])``; put it on a worker's port to attack from there),
and writes whatever source addresses it likes into its frames; it cannot change the port its frames
arrive on. :func:`acks_ahead`, :func:`short_credit_requests` and :func:`greedy_worker` come from a worker's
host itself (its link, MAC and IPv4 address), as that host could: the binding lets them through, and the
contract's other rules must hold.

Outcomes the contract states, for each attack (the model counts them, the run still ends ``done`` with
every worker holding the exact sum):

- :func:`spoofed_contributions`: ``drop_spoofed`` for each; no sum changes, no slot's length is fixed.
- :func:`forged_acks`: ``drop_spoofed`` for each; no delivered PSN moves, no slot is released early.
- :func:`acks_ahead`: forwarded (``acks_seen``), ``acks_ahead`` for each; no delivered PSN moves.
- :func:`forged_retransmissions`: ``drop_spoofed`` for each; nothing reaches the attacker.
- :func:`forged_credits`: ``drop_spoofed`` (the switch's MAC or IP as source) or ``drop_control`` (any
  other control packet); no worker receives one.
- :func:`short_credit_requests`: ``drop_control`` for each; no CREDIT answers them.
- message numbers across 2^32: ``build_allreduce(start_msg=NEAR_WRAP)``; with :func:`greedy_worker`
  the window check is tried across the wrap (``drop_no_credit``).
- :func:`forged_management`: ``management_refused`` for a request from anyone but the manager's place,
  ``management_bad`` for a malformed one in the manager's name; no register changes, nothing is answered.
"""

import numpy as np

from netreduce.host.icrc import ipv4_checksum
from netreduce.host.management import ManagementMessage, build_management_frame
from netreduce.host.protocol import (
    AggHeader,
    ControlMessage,
    build_control_frame,
    build_udp_frame,
    ip_to_int,
    mac_to_int,
)
from netreduce.host.worker import HostAddress
from netreduce.sim.fp import from_float64, get_format
from netreduce.sim.roce_model import deparse_frame, empty_header, parse_frame
from netreduce.wire import (
    ETHERTYPE_IPV4,
    MANAGEMENT_PORT,
    MSG_SEQ_MODULUS,
    PSN_MODULUS,
    RC_WRITE_OPCODES,
    ROCE_UDP_PORT,
    AethSyndrome,
    ControlType,
    ManagementOp,
)

__all__ = ["attacker", "NEAR_WRAP", "spoofed_contributions", "forged_acks", "acks_ahead",
           "forged_retransmissions", "forged_credits", "short_credit_requests", "greedy_worker",
           "forged_management"]

NEAR_WRAP = MSG_SEQ_MODULUS - 3         # a job's first msg_seq three messages before 2^32
_ACKNOWLEDGE = 0x11
_ACK = 0x1F                             # ACK syndrome with the credit field "no credit count"
_BTH_BYTES, _RETH_BYTES, _AETH_BYTES, _ICRC_BYTES = 12, 16, 4, 4
_IP_UDP_BYTES = 28


def attacker(port=0, index=0):
    """``(HostAddress, port)`` of attacker ``index`` for ``build_allreduce(extra_hosts=[...])``: a MAC and
    an IPv4 address of its own (10.0.66.x), on ``port``."""
    return HostAddress(0x02_BA_D0_00_00_01 + index, f"10.0.66.{index + 1}"), port


# --- spoofed contributions ---------------------------------------------------------------------------------

def spoofed_contributions(network, *, job=0, worker=0, attacker=0, every_ns=3_000, value=1e30):
    """Contribute as worker ``worker`` of ``job``: every ``every_ns`` the attacker sends a WRITE with the
    worker's source IPv4 address, the responder's QPN, MAC and IPv4 address as destination and the PSN the
    switch expects next on the connection, from its own MAC and port. Between messages it is a WRITE ONLY
    opening the connection's next message (aggregation header of the right job, dtype and ``msg_seq``),
    inside one a WRITE MIDDLE; the elements are ``value`` (1e30: a sum it got into would show), and the
    payload length alternates between the MTU and 32 bytes, so that a switch that let it in would fix the
    packet slot's length to a wrong one and lock the worker out.

    Contract: ``drop_spoofed`` each time (rule 5: wrong port or source MAC); nothing else changes. With the
    attacker on the worker's own port, only its source MAC differs from the worker's."""
    state = _connection(network, job, worker)
    conn, cfg = state.config, state.job.config
    host = _attacker(network, attacker)
    fmt = get_format(cfg.dtype)
    element = np.dtype("<u4") if fmt.width == 32 else np.dtype("<u2")
    poison = from_float64(fmt, np.full(cfg.mtu // element.itemsize, value)).astype(element).tobytes()
    fired = [0]

    def send():
        length = cfg.mtu if fired[0] % 2 == 0 else 32
        fired[0] += 1
        if state.slot is None:
            elements = (length - 16) // element.itemsize
            payload = (AggHeader(cfg.job, state.next_seq, elements, cfg.dtype).pack()
                       + poison[:length - 16])
            opcode, reth = RC_WRITE_OPCODES["ONLY"], (0x10_0000, 0x1000 + conn.responder_qpn, length)
        else:
            payload, opcode, reth = poison[:length], RC_WRITE_OPCODES["MIDDLE"], None
        host.send(_write(conn, opcode, state.expected, payload, reth=reth, eth_src=host.address.mac), network.now)

    _every(network, every_ns, send)


# --- forged ACKs ---------------------------------------------------------------------------------------------

def forged_acks(network, *, attacker=0, nak_every=3, ahead=0):
    """Acknowledge results for their receivers: as each WRITE the switch sends toward a responder leaves
    it (a result, a duplicate's answer, a pass-through), the attacker sends at once an ACK of its PSN (plus
    ``ahead``) as that responder (its source IPv4 address, the requester's QPN, MAC and IPv4 address as
    destination), every ``nak_every``-th one a sequence-error NAK for the PSN after it (which delivers the
    same), from its own MAC and port. A switch that took them would release the message slot before the
    receiver has its result, and a lost result could then never be answered again.

    Contract: ``drop_spoofed`` each time (rule 5); no delivered PSN moves, no slot is released by them."""
    host = _attacker(network, attacker)
    data = {(ip_to_int(c.requester_ip), c.responder_qpn): c for c in network.switch_config.connections}
    sent = [0]

    def tap(_port, frame):
        h = parse_frame(frame).header
        conn = data.get((h["ip_src"], h["bth_dest_qp"])) if h["roce"] else None
        if conn is None or h["bth_opcode"] not in _WRITES:
            return
        sent[0] += 1
        psn = (h["bth_psn"] + ahead) % PSN_MODULUS
        if sent[0] % nak_every == 0:
            ack = _ack(conn, (psn + 1) % PSN_MODULUS, AethSyndrome.NAK_PSN_SEQUENCE_ERROR,
                       eth_src=host.address.mac)
        else:
            ack = _ack(conn, psn, _ACK, eth_src=host.address.mac)
        host.send(ack, network.now)

    network.taps.append(tap)


def acks_ahead(network, *, job=0, worker=0, ahead=1 << 20, every_ns=5_000):
    """Acknowledge beyond what the switch has sent, from the bound place: every ``every_ns``, the host of
    the connection's responder itself (its link, MAC and IPv4 address) sends an ACK of the PSN ``ahead``
    of the newest result the switch sent on the connection. ``ahead`` (default 2^20) is far beyond any
    PSN the requester has sent, so the requester drops it as an acknowledgement of nothing; a small one
    would complete the requester's writes early, which is the requester's business, not the switch's.

    Contract: forwarded (``forwarded``, ``acks_seen``), ``acks_ahead`` each time (rule 6); delivered PSNs
    and message slots unchanged."""
    if not 0 < ahead < PSN_MODULUS // 2:
        raise ValueError(f"ahead {ahead} is not ahead (1 .. 2^23 - 1)")
    state = _connection(network, job, worker)
    conn = state.config
    host = _host_of(network, conn.responder_mac)

    def send():
        host.send(_ack(conn, (state.sent + ahead) % PSN_MODULUS, _ACK, eth_src=mac_to_int(conn.responder_mac)),
                  network.now)

    _every(network, every_ns, send)


# --- forged retransmissions ----------------------------------------------------------------------------------

def forged_retransmissions(network, *, job=0, worker=0, attacker=0, forge_mac=True):
    """Ask for a stored sum: as each result of the connection of worker ``worker`` of ``job`` leaves the
    switch, the attacker sends a retransmission of that packet (the worker's source IPv4 address, the
    responder's QPN, the same PSN, which is now behind the switch's expected PSN, opcode, RETH and length)
    addressed to itself (its own MAC and IPv4 address as destination), with the worker's source MAC if
    ``forge_mac``, else its own. From the worker's port with ``forge_mac``, only the destination differs
    from the worker's own retransmission, which the switch would answer with the sum.

    Contract: ``drop_spoofed`` each time (rule 5: the destination is not the responder); the attacker
    receives nothing."""
    state = _connection(network, job, worker)
    conn = state.config
    host = _attacker(network, attacker)
    key = (ip_to_int(conn.requester_ip), conn.responder_qpn)

    def tap(_port, frame):
        parsed = parse_frame(frame)
        h = parsed.header
        if not h["roce"] or (h["ip_src"], h["bth_dest_qp"]) != key or h["bth_opcode"] not in _WRITES:
            return
        forged = dict(h, eth_dst=host.address.mac, ip_dst=ip_to_int(host.address.ip))
        if not forge_mac:
            forged["eth_src"] = host.address.mac
        host.send(deparse_frame(forged, bytes(len(parsed.payload))), network.now)

    network.taps.append(tap)


# --- forged control packets -------------------------------------------------------------------------------

def forged_credits(network, *, job=0, attacker=0, every_ns=5_000):
    """Credits from anyone but the switch: every ``every_ns``, for each worker of ``job``, the attacker
    sends CREDITs opening the worker's window 2^20 messages wide: with the switch's source MAC and IPv4
    address, with the switch's IPv4 address and its own MAC, with the switch's MAC and its own IPv4
    address, and with its own addresses; and a CREDIT_REQUEST naming the worker, to the switch from its own
    addresses and to the worker's host.

    Contract: the first three are ``drop_spoofed`` (rule 2), the other three ``drop_control`` (rule 3); no
    worker receives any, so none posts beyond the switch's window (``drop_no_credit`` stays 0)."""
    host = _attacker(network, attacker)
    switch = network.switch_config
    port = switch.control_port
    own_mac, own_ip = host.address.mac, host.address.ip
    states = _job(network, job).connections

    def send():
        for state in states:
            conn = state.config
            credit = ControlMessage(ControlType.CREDIT, job, state.worker,
                                    (state.job.oldest + (1 << 20)) % MSG_SEQ_MODULUS)
            request = ControlMessage(ControlType.CREDIT_REQUEST, job, state.worker)
            for message, src_mac, src_ip, dst_mac, dst_ip in (
                    (credit, switch.mac, switch.ip, conn.requester_mac, conn.requester_ip),
                    (credit, own_mac, switch.ip, conn.requester_mac, conn.requester_ip),
                    (credit, switch.mac, own_ip, conn.requester_mac, conn.requester_ip),
                    (credit, own_mac, own_ip, conn.requester_mac, conn.requester_ip),
                    (request, own_mac, own_ip, switch.mac, switch.ip),
                    (request, own_mac, own_ip, conn.requester_mac, conn.requester_ip)):
                host.send(build_control_frame(message, src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip,
                                              dst_ip=dst_ip, port=port), network.now)

    _every(network, every_ns, send)


def short_credit_requests(network, *, job=0, worker=0, every_ns=5_000, udp_payload=8):
    """Control packets shorter than the 12-byte format: every ``every_ns``, the host of worker ``worker``
    of ``job`` itself (its link, MAC and IPv4 address: bound) sends a CREDIT_REQUEST whose UDP length (and
    IPv4 total length) covers only ``udp_payload`` (< 12) bytes of the message; the rest of the message is
    in the frame, after the UDP end, as Ethernet padding. A switch that read the padding would answer it.

    Contract: ``drop_control`` each time (rule 3); no CREDIT answers them."""
    if not 0 <= udp_payload < 12:
        raise ValueError(f"udp_payload {udp_payload} is not shorter than the 12-byte control message")
    state = _connection(network, job, worker)
    conn = state.config
    host = _host_of(network, conn.requester_mac)
    switch = network.switch_config
    frame = bytearray(build_control_frame(ControlMessage(ControlType.CREDIT_REQUEST, job, worker),
                                          src_mac=conn.requester_mac, dst_mac=switch.mac,
                                          src_ip=conn.requester_ip, dst_ip=switch.ip, port=switch.control_port))
    udp_len = 8 + udp_payload
    frame[16:18] = (20 + udp_len).to_bytes(2, "big")
    frame[24:26] = bytes(2)
    frame[24:26] = ipv4_checksum(frame[14:34]).to_bytes(2, "big")
    frame[38:40] = udp_len.to_bytes(2, "big")
    frame = bytes(frame)

    def send():
        host.send(frame, network.now)

    _every(network, every_ns, send)


# --- the in-band control plane -----------------------------------------------------------------------------

def forged_management(network, address, *, attacker=0, every_ns=7_000, forge=True, malformed=True):
    """Management requests to the switch of ``address`` (a ``netreduce.wire.ManagementAddress``) from attacker
    ``attacker``, every ``every_ns``, each a write that would turn forwarding entry 0 off: one from the
    attacker's own addresses; with ``forge``, one with the manager's MAC, IPv4 address and UDP port (send it
    from a port that is not the manager's); with ``malformed``, one in the manager's name with a version the
    switch does not speak.

    Contract: ``management_refused`` for a request from anyone but the manager's place (its port, when the
    address names one), ``management_bad`` for a malformed one from there; no register changes, no reply
    ("In-band control plane")."""
    from netreduce.registers import address as register_address
    host = _attacker(network, attacker)
    message = ManagementMessage(ManagementOp.WRITE, 0x0BAD, register_address("forwarding", 0, "enable"), 0)
    forged = build_management_frame(message, address)
    own = build_udp_frame(forged[42:54], src_mac=host.address.mac, dst_mac=address.switch_mac,
                          src_ip=host.address.ip, dst_ip=address.switch_ip, sport=address.manager_port,
                          dport=MANAGEMENT_PORT)
    bad = bytearray(forged)
    bad[44] = 9                         # the version (the UDP checksum is 0: nothing else to mend)
    frames = [own] + ([forged] if forge else []) + ([bytes(bad)] if malformed else [])

    def send():
        for frame in frames:
            host.send(frame, network.now)

    _every(network, every_ns, send)


# --- credit window across the wrap -----------------------------------------------------------------------------

def greedy_worker(network, *, job=0, worker=0):
    """Worker ``worker`` of ``job`` ignores its credits and posts every message at once (its own host, its
    own connection: bound). With ``build_allreduce(start_msg=NEAR_WRAP)`` its messages beyond the window
    cross 2^32, where a window check that does not compare modulo 2^32 would let them in.

    Contract: ``drop_no_credit`` for a first packet beyond the window (rule 7); its requester retries
    until the window has moved; other jobs are untouched."""
    target = next(w for w in network.workers if w.job.job == job and w.index == worker)
    target.allowed = (target.msg_seq(0) + (1 << 30)) % MSG_SEQ_MODULUS


# --- helpers ------------------------------------------------------------------------------------------------

_WRITES = set(RC_WRITE_OPCODES.values())


def _model(network):
    model = getattr(network.engine, "model", None)
    if model is None:
        raise ValueError("the attacks read the golden model's state: run them on a ModelEngine")
    return model


def _job(network, job):
    return _model(network).jobs[job]


def _connection(network, job, worker):
    return _job(network, job).connections[worker]


def _attacker(network, index):
    if index >= len(network.extra_hosts):
        raise ValueError(f"no attacker {index}: build the network with extra_hosts=[attacks.attacker(port), ...]")
    return network.extra_hosts[index]


def _host_of(network, mac):
    mac = mac_to_int(mac)
    return next(host for host in network.hosts if host.address.mac == mac)


def _every(network, every_ns, action):
    """``action()`` now and every ``every_ns`` for as long as the run goes on."""
    def fire():
        action()
        network.at(network.now + every_ns, fire)
    network.at(network.now, fire)


def _template(conn, eth_src, opcode, psn, *, to_requester):
    h = empty_header()
    if to_requester:
        src_ip, dst_mac, dst_ip = conn.responder_ip, conn.requester_mac, conn.requester_ip
        qpn = conn.requester_qpn
    else:
        src_ip, dst_mac, dst_ip = conn.requester_ip, conn.responder_mac, conn.responder_ip
        qpn = conn.responder_qpn
    h.update(roce=1, eth_dst=mac_to_int(dst_mac), eth_src=mac_to_int(eth_src), ethertype=ETHERTYPE_IPV4,
             ip_version=4, ip_flags_frag=0x4000, ip_ttl=64, ip_proto=17, ip_src=ip_to_int(src_ip),
             ip_dst=ip_to_int(dst_ip), udp_sport=0xC000, udp_dport=ROCE_UDP_PORT, bth_opcode=opcode,
             bth_pkey=0xFFFF, bth_dest_qp=qpn, bth_psn=psn)
    return h


def _write(conn, opcode, psn, payload, *, reth, eth_src):
    """A WRITE on the connection's data key (requester to responder) from ``eth_src``."""
    h = _template(conn, eth_src, opcode, psn, to_requester=False)
    extension = 0
    if reth is not None:
        h.update(has_reth=1, reth_va=reth[0], reth_rkey=reth[1], reth_dma_len=reth[2])
        extension = _RETH_BYTES
    h["bth_pad"] = -len(payload) % 4
    payload = payload + bytes(h["bth_pad"])
    h["ip_len"] = _IP_UDP_BYTES + _BTH_BYTES + extension + len(payload) + _ICRC_BYTES
    h["udp_len"] = h["ip_len"] - 20
    return deparse_frame(h, payload)


def _ack(conn, psn, syndrome, *, eth_src):
    """An RC ACKNOWLEDGE on the connection's ACK key (responder to requester) from ``eth_src``."""
    h = _template(conn, eth_src, _ACKNOWLEDGE, psn, to_requester=True)
    h.update(has_aeth=1, aeth_syndrome=int(syndrome), aeth_msn=0)
    h["ip_len"] = _IP_UDP_BYTES + _BTH_BYTES + _AETH_BYTES + _ICRC_BYTES
    h["udp_len"] = h["ip_len"] - 20
    return deparse_frame(h, b"")
