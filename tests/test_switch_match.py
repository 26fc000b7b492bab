"""amaranth.sim unit test of hw/switch/match.py (``ConnectionMatch``) against the golden model: every frame
of a table of cases (bound ACKs and data frames of every connection, each with one thing of its binding
wrong; the switch's own addresses; control packets to the switch and to a host; management requests from
the manager's place and from elsewhere; unregistered traffic) is classified by the RTL and by
``SwitchModel`` (rules 2 to 5 of "Switch behaviour, per received frame"), with the headers and their ports
offered with random idle clocks and taken with random backpressure."""

import random

import pytest
from amaranth.sim import Simulator

from netreduce.host.management import ManagementMessage, build_management_frame, management_address
from netreduce.host.packets import build_ack, build_roce_frame
from netreduce.host.protocol import (
    ControlMessage,
    build_control_frame,
    ip_to_int,
    mac_to_int,
    parse_control_payload,
    udp_payload,
)
from netreduce.hw.stream import ParsedHeader
from netreduce.hw.switch.match import ConnectionMatch
from netreduce.hw.switch.registers import JobEntry, SwitchAddress
from netreduce.registers import register_writes, vlan_word
from netreduce.sim.roce_model import parse_frame
from netreduce.sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig, SwitchModel
from netreduce.wire import ControlType, ManagementOp

from references import write_block

JOBS, WORKERS, PORTS = 2, 3, 2
MANAGEMENT = management_address(switch_mac="02:4e:52:00:00:fe", switch_ip="10.0.255.254",
                                manager_mac="02:00:00:00:99:01", manager_ip="10.0.99.1", manager_port=5000,
                                manager_ingress=1)
# what the golden model's register file needs of the build
BUILD = {"jobs": JOBS, "workers": WORKERS, "ports": PORTS, "forwarding_entries": 4, "mtu": 1024}
WRITE_ONLY = 0x0A


def host(i):
    return 0x02_00_00_00_00_10 + i, f"10.0.1.{i + 1}"


def config():
    """Two jobs (ids 5 and 9, the second a bounded-loss job with 2 of the 3 workers: its data frames' port
    is not part of their binding), hosts on both ports, one requester in VLAN 7."""
    connections = []
    for j, (job, workers) in enumerate(((5, 3), (9, 2))):
        for w in range(workers):
            req, resp = 2 * w + 10 * j, 2 * w + 1 + 10 * j
            connections.append(ConnectionConfig(
                job, w, host(req)[0], host(req)[1], 0x100 + 16 * j + w, host(resp)[0], host(resp)[1],
                0x200 + 16 * j + w, 1000 * w, requester_port=req % PORTS, responder_port=resp % PORTS,
                requester_vlan=7 if (j, w) == (0, 1) else None, responder_rkey=0x77 if j else None))
    return SwitchConfig(mac="02:4e:52:00:00:01", ip="10.0.255.1", ports=PORTS,
                        jobs=[JobConfig(5, 3), JobConfig(9, 2, traffic_class="lossy", deadline_clocks=100)],
                        connections=connections)


def side(conn, name):
    return {"mac": mac_to_int(getattr(conn, f"{name}_mac")), "ip": getattr(conn, f"{name}_ip"),
            "port": getattr(conn, f"{name}_port"), "vlan": getattr(conn, f"{name}_vlan")}


def data_frame(src, dst, qpn, **changes):
    fields = dict(eth_src=src["mac"], eth_dst=dst["mac"], src_ip=src["ip"], dst_ip=dst["ip"], dest_qp=qpn,
                  vlan=src["vlan"], psn=3, reth=(0, 0, 64))
    fields.update(changes)
    return build_roce_frame(WRITE_ONLY, bytes(64), **fields)


def ack_frame(src, dst, qpn, **changes):
    fields = dict(eth_src=src["mac"], eth_dst=dst["mac"], src_ip=src["ip"], dst_ip=dst["ip"], dest_qp=qpn,
                  vlan=src["vlan"])
    fields.update(changes)
    return build_ack(3, 1, **fields)


def cases(cfg, rng):
    """``(port, frame)`` of every case."""
    out = []
    stranger = {"mac": 0x02_BA_D0_00_00_01, "ip": "10.0.66.1", "port": 1, "vlan": None}
    for conn in cfg.connections:
        req, resp = side(conn, "requester"), side(conn, "responder")
        for build, src, dst, qpn in ((data_frame, req, resp, conn.responder_qpn),
                                     (ack_frame, resp, req, conn.requester_qpn)):
            out.append((src["port"], build(src, dst, qpn)))
            out.append(((src["port"] + 1) % PORTS, build(src, dst, qpn)))                  # wrong port
            out.append((src["port"], build(src, dst, qpn, eth_src=stranger["mac"])))       # wrong MAC
            out.append((src["port"], build(src, dst, qpn, vlan=3)))                         # wrong VLAN
            out.append((src["port"], build(src, dst, qpn, vlan=None)))
            out.append((src["port"], build(src, dst, qpn, eth_dst=stranger["mac"])))       # to the attacker
            out.append((src["port"], build(src, dst, qpn, dst_ip=stranger["ip"])))
            out.append((src["port"], build(src, dst, qpn, dest_qp=qpn ^ 1)))               # another key
            out.append((src["port"], build(src, dst, qpn, src_ip=stranger["ip"])))
        # control requests naming the connection's worker: a CREDIT_REQUEST from its requester, a RESULT_REQUEST
        # from its responder, each with one thing of the sender wrong
        for kind, src in ((ControlType.CREDIT_REQUEST, req), (ControlType.RESULT_REQUEST, resp)):
            message = ControlMessage(kind, conn.job, conn.worker, 1)
            wrong = ({"vlan": 3}, {"src_mac": stranger["mac"]}, {"src_ip": stranger["ip"]})
            for port, changes in ((src["port"], {}), ((src["port"] + 1) % PORTS, {}),
                                  *((src["port"], change) for change in wrong)):
                sender = {"src_mac": src["mac"], "src_ip": src["ip"], "vlan": src["vlan"], **changes}
                vlan = sender.pop("vlan")
                frame = build_control_frame(message, dst_mac=cfg.mac, dst_ip=cfg.ip, **sender)
                out.append((port, frame if vlan is None else frame[:12] + bytes([0x81, 0, 0, vlan]) + frame[12:]))
    conn = cfg.connections[0]
    req, resp = side(conn, "requester"), side(conn, "responder")
    out.append((req["port"], data_frame(req, resp, conn.responder_qpn, eth_src=mac_to_int(cfg.mac))))
    out.append((req["port"], data_frame(req, resp, conn.responder_qpn, src_ip=cfg.ip)))
    out.append((resp["port"], ack_frame(resp, req, conn.requester_qpn, eth_src=mac_to_int(cfg.mac))))
    request = ControlMessage(ControlType.CREDIT_REQUEST, 5, 0)
    out.append((req["port"], build_control_frame(request, src_mac=req["mac"], dst_mac=cfg.mac, src_ip=req["ip"],
                                                 dst_ip=cfg.ip)))
    out.append((req["port"], build_control_frame(request, src_mac=req["mac"], dst_mac=resp["mac"],
                                                 src_ip=req["ip"], dst_ip=resp["ip"])))           # stray
    credit = ControlMessage(ControlType.CREDIT, 5, 0, 99)
    out.append((1, build_control_frame(credit, src_mac=stranger["mac"], dst_mac=req["mac"], src_ip=cfg.ip,
                                       dst_ip=req["ip"])))                                       # forged CREDIT
    out.append((0, bytes.fromhex("ffffffffffff") + bytes(6) + b"\x08\x06" + bytes(46)))     # ARP-like
    request = build_management_frame(ManagementMessage(ManagementOp.READ, 1, 0x200), MANAGEMENT)

    def changed(frame, at, value):
        return frame[:at] + value + frame[at + len(value):]
    out += [(1, request), (0, request),                                                 # the manager's port, another
            (1, changed(request, 6, bytes(5) + b"\x07")),                               # another MAC
            (1, changed(request, 26, bytes([10, 0, 99, 2]))),                           # another IPv4 (no checksum)
            (1, changed(request, 34, (5001).to_bytes(2, "big"))),                       # another UDP port
            (1, request[:12] + bytes([0x81, 0, 0, 5]) + request[12:]),                  # tagged
            (1, changed(request, 36, (4794).to_bytes(2, "big"))),                       # another UDP port to: none
            (1, changed(request, 0, bytes(5) + b"\x09")),                               # another MAC to: none
            (1, changed(request, 6, mac_to_int(cfg.mac).to_bytes(6, "big"))),          # the switch's MAC: spoofed
            (0, build_management_frame(ManagementMessage(ManagementOp.READ, 1, 0x200, 7, reply=True),
                                       MANAGEMENT))]                  # a reply forged in the switch's name: spoofed
    rng.shuffle(out)
    return out


def model_counters(cfg, port, frame):
    """The golden model's counters after the frame."""
    model = SwitchModel(cfg, management=MANAGEMENT, build=BUILD)
    model.receive(port, frame)
    return model.counters


def model_class(cfg, port, frame):
    """What the golden model does with the frame, as the match's classes."""
    c = model_counters(cfg, port, frame)
    h = parse_frame(frame).header
    if c["drop_spoofed"]:
        return "spoofed"
    if c["management_requests"] or c["management_bad"]:
        return "management"
    if c["management_refused"]:
        return "refused"
    if c["drop_control"] or c["credit_requests"] or c["result_requests"]:
        return "control" if h["ip_dst"] == ip_to_int(cfg.ip) else "stray"
    if c["acks_seen"]:
        return "ack"
    if c["forwarded"]:
        return "none"
    return "data"


def connection_index(cfg, h, kind):
    """c = (job position) * WORKERS + worker of the connection whose key the header carries."""
    position = {job.job: j for j, job in enumerate(cfg.jobs)}
    for conn in cfg.connections:
        if kind == "ack":
            key = (ip_to_int(conn.responder_ip), conn.requester_qpn)
        else:
            key = (ip_to_int(conn.requester_ip), conn.responder_qpn)
        if key == (h["ip_src"], h["bth_dest_qp"]):
            return position[conn.job] * WORKERS + conn.worker
    raise AssertionError("no connection")


async def configure(ctx, dut, cfg):
    """The switch's addresses and the jobs into their ports, each connection's registers through the register
    port's writes (``connection_write``)."""
    ctx.set(dut.switch, SwitchAddress.const({"mac": mac_to_int(cfg.mac), "ip": ip_to_int(cfg.ip),
                                             "control_port": cfg.control_port}))
    for j, job in enumerate(cfg.jobs):
        ctx.set(dut.jobs[j], JobEntry.const({"valid": 1, "id": job.job, "workers": job.workers, "lossy": job.lossy}))
    for conn in cfg.connections:
        c = [job.job for job in cfg.jobs].index(conn.job) * WORKERS + conn.worker
        values = {"requester_qpn": conn.requester_qpn, "responder_qpn": conn.responder_qpn}
        for name in ("requester", "responder"):
            place = side(conn, name)
            values.update({f"{name}_mac": place["mac"], f"{name}_ip": ip_to_int(place["ip"]),
                           f"{name}_port": place["port"], f"{name}_vlan": vlan_word(place["vlan"])})
        await write_block(ctx, dut.connection_write, "connection", register_writes("connection", c, **values,
                                                                                    enable=1))


async def offer_header(ctx, dut, port, header):
    """A header and its port offered, both streams in the same clock, until the match takes them."""
    ctx.set(dut.header.payload, ParsedHeader.const(header))
    ctx.set(dut.port.payload, port)
    ctx.set(dut.header.valid, 1)
    ctx.set(dut.port.valid, 1)
    await ctx.tick().until(dut.header.ready & dut.port.ready)


# header_clocks 1: every connection compared at once (512 bits); 4: two lanes in three steps; 8: one lane in six
# steps (64 bits; in the slow tier, beside the 64-bit switch's testbenches)
@pytest.mark.parametrize("header_clocks", [1, 4, pytest.param(8, marks=pytest.mark.slow(minutes=0.2))])
def test_match_agrees_with_the_model(header_clocks):
    rng = random.Random(5)
    cfg = config()
    frames = cases(cfg, rng)
    dut = ConnectionMatch(jobs=JOBS, workers=WORKERS, ports=PORTS, management=MANAGEMENT,
                          header_clocks=header_clocks)
    headers = [parse_frame(frame).header for _, frame in frames]
    seen = []

    async def configure_and_offer(ctx):
        await configure(ctx, dut, cfg)
        for (port, _), header in zip(frames, headers, strict=True):
            while rng.random() < 0.3:
                await ctx.tick()
            await offer_header(ctx, dut, port, header)
            ctx.set(dut.header.valid, 0)
            ctx.set(dut.port.valid, 0)

    async def take(ctx):
        while len(seen) < len(frames):
            ctx.set(dut.o.ready, rng.random() < 0.7)
            _, _, valid, ready, payload = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                seen.append(payload)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(configure_and_offer)
    sim.add_testbench(take)
    sim.run_until(1e-8 * 30 * len(frames))
    assert len(seen) == len(frames)
    kinds, requests = [], []
    for (port, frame), header, out in zip(frames, headers, seen, strict=True):
        kind = model_class(cfg, port, frame)
        kinds.append(kind)
        match = out.match
        got = [k for k in ("spoofed", "control", "stray", "ack", "data", "management", "refused") if getattr(match, k)]
        assert got == ([] if kind == "none" else [kind]), (port, header, kind, got)
        assert match.port == port and out.header.bth_psn == header["bth_psn"]
        if kind in ("ack", "data"):
            assert match.conn == connection_index(cfg, header, kind)
        message = parse_control_payload(udp_payload(frame, header)) if kind == "control" else None
        if message is not None and message.type in (ControlType.CREDIT_REQUEST, ControlType.RESULT_REQUEST):
            # the sender's bit of the connection the request names, as the model's check of the sender (a
            # RESULT_REQUEST is answered for a bounded-loss job only: the bit is checked for those)
            j = [job.job for job in cfg.jobs].index(message.job)
            answered = model_counters(cfg, port, frame)["drop_control"] == 0
            if message.type == ControlType.CREDIT_REQUEST:
                requests.append((match.from_requester >> (j * WORKERS + message.worker) & 1, answered))
            elif cfg.jobs[j].lossy:
                requests.append((match.from_responder >> (j * WORKERS + message.worker) & 1, answered))
    assert all(bit == answered for bit, answered in requests), requests
    assert {answered for _, answered in requests} == {True, False} and len(requests) >= 35
    for kind in ("spoofed", "control", "stray", "ack", "data", "management", "refused", "none"):
        assert kind in kinds, kind       # the table reaches every class
    # a bounded-loss job's data frame on the wrong port is still its worker's
    lossy_data = [(port, out.match.conn) for (port, _), out in zip(frames, seen, strict=True)
                  if out.match.data and out.match.conn // WORKERS == 1]
    assert {port for port, _ in lossy_data} == {0, 1}


@pytest.mark.parametrize("header_clocks", [1, 4, 8])
def test_a_header_every_header_clocks(header_clocks):
    """Headers offered back to back, matches taken at once: the match takes a header every ``steps`` clocks
    (``ceil(C / lanes)``, at most ``header_clocks``), one a clock where every connection is compared at once."""
    cfg = config()
    frames = cases(cfg, random.Random(6))[:40]
    dut = ConnectionMatch(jobs=JOBS, workers=WORKERS, ports=PORTS, management=MANAGEMENT,
                          header_clocks=header_clocks)
    taken = []

    async def offer(ctx):
        await configure(ctx, dut, cfg)
        ctx.set(dut.o.ready, 1)
        for port, frame in frames:
            await offer_header(ctx, dut, port, parse_frame(frame).header)
        ctx.set(dut.header.valid, 0)
        ctx.set(dut.port.valid, 0)

    async def watch(ctx):
        clock = 0
        async for _, _, valid, ready in ctx.tick().sample(dut.header.valid, dut.header.ready):
            clock += 1
            if valid and ready:
                taken.append(clock)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(offer)
    sim.add_process(watch)
    sim.run_until(1e-8 * (40 * header_clocks + 200))
    assert len(taken) == len(frames)
    steps = -(-JOBS * WORKERS // -(-JOBS * WORKERS // header_clocks))
    assert steps <= header_clocks
    assert {b - a for a, b in zip(taken, taken[1:], strict=False)} == {steps}
