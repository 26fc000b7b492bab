"""Test helpers: the RoCE v2 captures from real NICs (tests/data/captures, with their provenance in its
README.md), independent references written from the RFCs and the IBA, register writes through a
``csr`` port in amaranth.sim, a golden model with one bounded-loss job and its workers' frames, and the frames
of the parser's and the deparser's unit tests."""

import random
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from netreduce.host import strategies as roce_st
from netreduce.host.packets import build_roce_frame
from netreduce.host.pcap import read_pcap
from netreduce.host.protocol import AggHeader, ControlMessage, build_control_frame
from netreduce.registers import READ_LATENCY, block
from netreduce.sim.switch_model import ConnectionConfig, JobClass, JobConfig, SwitchConfig, SwitchModel
from netreduce.wire import ControlType

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"


def capture_files(bad=None):
    """Every .pcap under the captures folder; ``bad=True``/``False`` picks those under icrc_bad/ or not."""
    files = sorted(CAPTURES.rglob("*.pcap"))
    if not files:
        raise FileNotFoundError(f"no .pcap files under {CAPTURES}")
    if bad is not None:
        files = [f for f in files if (f.parent.name == "icrc_bad") == bad]
    return files


# --- independent references for the tests (written from the RFCs and the IBA, not from the code) ------

EXTENSION_ORDER = ("deth", "reth", "aeth", "immdt", "ieth")


def ones_complement_sum(data):
    """RFC 1071 ones'-complement sum of big-endian 16-bit words."""
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def extensions_of(opcode):
    """The extension headers an opcode carries, in wire order."""
    from netreduce.wire import OPCODES
    info = OPCODES.get(opcode)
    return [name for name in EXTENSION_ORDER if info is not None and getattr(info, name)]


# --- captures of `netreduce simulate --pcap` ---------------------------------------------------------

def check_link_capture(path, summary):
    """Assert what ``netreduce simulate --pcap`` promises of the capture at ``path``, against the run's
    JSON ``summary`` (``netreduce.host.network``: each host link has a host end and a switch end; a frame
    is recorded outbound at its sender's end as sent and inbound at its receiver's end as received, the
    fault injector in between). Returns the counts per direction (``up``: host to switch, ``down``: switch
    to host) of frames ``sent``, ``received`` and ``corrupted`` (received with the bit the injector
    flipped), e.g. ``counts["received_up"]``."""
    import re
    from collections import Counter, defaultdict

    from netreduce.host.icrc import icrc_ok
    from netreduce.host.pcap import INBOUND, OUTBOUND, read_pcap_timed, read_pcapng
    from netreduce.sim.roce_model import parse_frame

    records = read_pcapng(path)
    timed = read_pcap_timed(path)
    assert [frame for _, frame in timed] == [r.frame for r in records]
    assert all(round(stamp * 1e9) == r.time_ns for (stamp, _), r in zip(timed, records, strict=True))
    times = defaultdict(list)
    for r in records:
        times[r.interface].append(r.time_ns)
    assert all(t == sorted(t) for t in times.values()), "timestamps go back on an interface"
    assert max(r.time_ns for r in records) <= summary["simulated_ns"]

    sent, received = defaultdict(list), defaultdict(list)   # (direction, host) -> records
    for r in records:
        host = re.search(r"host\d+", r.interface).group()
        at_switch = r.interface.startswith("switch port")
        assert r.direction in (INBOUND, OUTBOUND), r
        direction = "up" if at_switch == (r.direction == INBOUND) else "down"
        (sent if r.direction == OUTBOUND else received)[direction, host].append(r)
    counts = Counter()
    for key, copies in received.items():
        first_sent = {}
        for r in sent[key]:
            first_sent.setdefault(r.frame, r.time_ns)
        for r in copies:
            corrupted = any("bit flipped" in comment for comment in r.comments)
            if corrupted:       # one bit off a frame sent on the same link and direction
                assert any(len(s.frame) == len(r.frame) and bin(int.from_bytes(bytes(
                    a ^ b for a, b in zip(s.frame, r.frame, strict=True)), "big")).count("1") == 1 for s in sent[key])
                counts[f"corrupted_{key[0]}"] += 1
            else:               # exactly a frame sent on that link and direction, earlier
                assert r.time_ns > first_sent.get(r.frame, r.time_ns), f"{key}: received, never sent"
            if parse_frame(r.frame).header["roce"]:
                assert icrc_ok(r.frame) != corrupted, f"{key}: ICRC against the injector's comment"
    for host in {host for _, host in sent}:     # one MAC each link: the source up, the destination down
        up = [r.frame for r in sent["up", host] + received["up", host]]
        down = [r.frame for r in sent["down", host] + received["down", host]]
        assert len({f[6:12] for f in up} | {f[:6] for f in down}) == 1, f"{host}: frames of another host"
    for key, copies in sent.items():
        for r in copies:
            assert r.comments == []
            if parse_frame(r.frame).header["roce"]:
                assert icrc_ok(r.frame), f"{key}: {r.interface} sent a frame with a bad ICRC"
    for direction in ("up", "down"):
        counts[f"sent_{direction}"] = sum(len(v) for (d, _), v in sent.items() if d == direction)
        counts[f"received_{direction}"] = sum(len(v) for (d, _), v in received.items() if d == direction)

    # the summary counts frames onto the links: up, after the hosts' fault injectors; down, as the switch
    # sends them. Frames still on a link (or held back by an injector) when the run stops are not received.
    drops = summary["drops"]
    assert counts["sent_down"] == summary["switch_to_host"]["packets"]
    assert (counts["received_up"] <= summary["host_to_switch"]["packets"]
            <= counts["sent_up"] - drops.get("up_loss", 0) + drops.get("up_duplicate", 0))
    assert (counts["received_down"]
            <= counts["sent_down"] - drops.get("down_loss", 0) + drops.get("down_duplicate", 0))
    assert counts["corrupted_up"] <= drops.get("up_corrupt", 0)
    assert counts["corrupted_down"] <= drops.get("down_corrupt", 0)
    assert counts["sent_up"] and counts["sent_down"] and counts["received_up"] and counts["received_down"]
    return counts


async def read_register(ctx, csr, at):
    """amaranth.sim: the word at ``at`` through the ``csr`` port (``READ_LATENCY`` clocks after its address)."""
    ctx.set(csr.addr, at)
    await ctx.tick().repeat(READ_LATENCY)
    return ctx.get(csr.rdata)


async def write_registers(ctx, csr, writes):
    """amaranth.sim: each ``(word address, word)`` of ``writes`` through the ``csr`` port, one a clock;
    ``we`` low afterwards."""
    for at, word in writes:
        ctx.set(csr.addr, at)
        ctx.set(csr.wdata, word)
        ctx.set(csr.we, 1)
        await ctx.tick()
    ctx.set(csr.we, 0)


async def write_block(ctx, port, block_name, writes):
    """amaranth.sim: each ``(word address, word)`` of ``writes`` (words of block ``block_name``, as
    ``register_writes`` gives them) as a register port's write reaches a component that keeps a copy of the
    block (``port``: ``hw.csr.block_write_layout``), one a clock; ``valid`` low afterwards."""
    blk = block(block_name)
    for at, word in writes:
        index, offset = divmod(at - blk.base, blk.stride)
        ctx.set(port, {"valid": 1, "index": index, "offset": offset, "word": word})
        await ctx.tick()
    ctx.set(port.valid, 0)


# --- a golden model with one bounded-loss job, and its workers' frames (tests/test_lossy_model.py, the
# switch testbench's directed runs) ---------------------------------------------------------------------------

SWITCH_MAC, SWITCH_IP = 0x024E52000001, "10.0.255.1"
WRITE_ONLY_IMM = 0x2B           # UC RDMA WRITE ONLY with immediate
RC_WRITE_ONLY = 0x0A
DEADLINE = 100
JOB = 7
RESULT_VA = 0x10_0000


def host_mac(h):
    return 0x020000000001 + h


def host_ip(h):
    return f"10.0.0.{h + 1}"


def responder_rkey(w):
    return 0x5000 + w


class Fabric:
    """A switch model with one bounded-loss job of ``workers`` workers on hosts 0..N-1 (worker w writes to
    host w+1), host h on port h mod ``ports``, every host in VLAN ``vlan`` (None: untagged); with
    ``reliable_too`` a reliable job ``JOB + 1`` of the same workers, or with ``lossy_too`` (a deadline) a second
    bounded-loss job ``JOB + 1`` of that deadline; every job of MTU ``mtu``. Without ``bounded_loss`` (a switch
    built without the class) the reliable job alone."""

    def __init__(self, workers=4, ports=4, slots=4, vlan=None, deadline=DEADLINE, start_msg=0, reliable_too=False,
                 lossy_too=None, mtu=64, bounded_loss=True, max_frame=SwitchConfig.max_frame):
        self.workers, self.vlan = workers, vlan
        self.job = JobConfig(job=JOB, workers=workers, mtu=mtu, message_slots=slots, traffic_class="lossy",
                             deadline_clocks=deadline, start_msg=start_msg)
        jobs = [self.job] + ([JobConfig(job=JOB + 1, workers=workers, mtu=mtu)] if reliable_too else [])
        if not bounded_loss:
            assert reliable_too and lossy_too is None, "without the class: the reliable job alone"
            jobs = jobs[1:]
        if lossy_too is not None:
            assert not reliable_too, "one second job: reliable or bounded-loss"
            jobs.append(JobConfig(job=JOB + 1, workers=workers, mtu=mtu, message_slots=slots, traffic_class="lossy",
                                  deadline_clocks=lossy_too, start_msg=start_msg))
        self.conns = {}
        for job in jobs:
            for w in range(workers):
                peer = (w + 1) % workers
                self.conns[job.job, w] = ConnectionConfig(
                    job.job, w, host_mac(w), host_ip(w), 0x100 + 16 * job.job + w, host_mac(peer), host_ip(peer),
                    0x200 + 16 * job.job + w, start_psn=1000 * (w + 1), requester_port=w % ports,
                    requester_vlan=vlan, responder_port=peer % ports, responder_vlan=vlan,
                    responder_rkey=responder_rkey(w) if job.traffic_class is JobClass.LOSSY else None)
        self.config = SwitchConfig(mac=SWITCH_MAC, ip=SWITCH_IP, ports=ports,
                                   forwarding={host_mac(h): h % ports for h in range(workers)},
                                   jobs=jobs, connections=list(self.conns.values()), bounded_loss=bounded_loss,
                                   max_frame=max_frame)
        self.switch = SwitchModel(self.config)
        self.frames_sent = 0

    def contribution(self, w, seq, values, *, job=JOB, opcode=WRITE_ONLY_IMM, header=None, **fields):
        """Worker w's message ``seq``: its aggregation header and ``values``, bound to its connection (a
        PSN that says nothing of the message: the switch must not read it)."""
        conn = self.conns[job, w]
        payload = (header or AggHeader(job, seq, len(values), priority=w)).pack() + values.astype("<f4").tobytes()
        self.frames_sent += 1
        values = {"eth_src": host_mac(w), "eth_dst": conn.responder_mac, "src_ip": conn.requester_ip,
                  "dst_ip": conn.responder_ip, "dest_qp": conn.responder_qpn, "vlan": self.vlan,
                  "psn": (7919 * self.frames_sent) % (1 << 24), "reth": (RESULT_VA + 64 * seq, 0x77, len(payload)),
                  "dscp": 32 + w, "sport": 0xC000 + w}
        if opcode == WRITE_ONLY_IMM:
            values["immdt"] = 1 << w
        values.update(fields)
        return build_roce_frame(opcode, payload, **values)

    def request(self, w, seq, kind=ControlType.RESULT_REQUEST, *, src=None, job=JOB):
        """A control request naming worker w, from host ``src`` (default: w's responder, the receiver)."""
        src = (w + 1) % self.workers if src is None else src
        return build_control_frame(ControlMessage(kind, job, w, seq), src_mac=host_mac(src), dst_mac=SWITCH_MAC,
                                   src_ip=host_ip(src), dst_ip=SWITCH_IP)

    def send(self, frame, port=0, now=None):
        return self.switch.receive(port, frame, now=now)

    def counters(self, *names):
        return {name: self.switch.counters[name] for name in names}


def elements(rng, n=8):
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32)


# --- frames for the parser's and the deparser's unit tests -----------------------------------------------

def capture_sample(count, seed):
    """``count`` frames of the captures (all of them if fewer), drawn with ``seed``."""
    frames = [frame for path in capture_files() for frame in read_pcap(path)]
    return random.Random(seed).sample(frames, min(count, len(frames)))


def ip_versions_mix():
    """RoCE and plain UDP over IPv4 and IPv6, tagged and not, with a DSCP each."""
    frames = []
    for i, (v6, vlan) in enumerate([(False, None), (True, None), (True, 5), (False, 9)] * 3):
        addresses = dict(ipv6=True, src_ip="fd00::1", dst_ip="fd00::2") if v6 else {}
        frames.append(build_roce_frame(0x0A, bytes(range(i, i + 40)), reth=(0x1000 * i, 7, 40), psn=i,
                                       vlan=vlan, dscp=i + 1, **addresses))
        frames.append(build_roce_frame(0x04, bytes(i), psn=i, dport=9, vlan=vlan, dscp=i + 20, **addresses))
    return frames


# hypothesis: lists of valid and malformed frames (the parser's and the deparser's unit tests)
FRAME_MIX = st.lists(st.one_of(roce_st.roce_frames(max_payload=300),
                               roce_st.malformed_frames().map(lambda bad: bad.frame)),
                     min_size=1, max_size=8)
