"""amaranth.sim unit test of hw/switch/emitter.py (``Emitter``) with the deparser behind it, at both widths.

A sequence of descriptors of every kind (frames that go on, a duplicate's answer, a slot's results to every
worker, a bounded-loss slot's results built from its template, a resend, CREDITs to a job and to one
worker) is offered with random idle clocks over packet ring, header store and result memories filled by the
test, and the frames out are taken with random backpressure. Every frame must be the one the switch's
contract sends (docs/ARCHITECTURE.md, "Switch behaviour, per received frame"), written here from the host
library and the golden model's serializer: a frame that goes on is the frame that came in; a result is the
worker's stored header with the sum, a first packet's own 16 bytes over its start; a bounded-loss result the
template's header addressed from the worker's requester to its responder with the connection's next PSN, the
responder's R_Key and the bitmap as immediate; a CREDIT is ``build_control_frame``'s. Each frame's class
goes with it; no result leaves before its sum is done and the store holds its headers (``stored``); with no
backpressure no frame pauses inside. The connections are written as the register port writes them
(``connection_write``: the emitter's own tables)."""

import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from netreduce.host.packets import build_roce_frame
from netreduce.host.protocol import ControlMessage, build_control_frame, ip_to_int, mac_to_int
from netreduce.hw.deparser import RoceDeparser
from netreduce.hw.stream import ParsedHeader
from netreduce.hw.switch.emitter import OWN_BYTES, Emission, Emitter, StoredHeader, stored_header_fields
from netreduce.hw.switch.registers import JobEntry, SwitchAddress
from netreduce.registers import register_writes, vlan_word
from netreduce.sim.amaranth_streams import send_records
from netreduce.sim.roce_model import deparse_frame, parse_frame
from netreduce.wire import CONTROL_DSCP, CONTROL_PORT, UC_WRITE_OPCODES, ControlType

from references import write_block

JOBS, WORKERS, MESSAGE_SLOTS, MESSAGE_PACKETS, MTU, MAX_FRAME = 2, 3, 2, 2, 256, 1024
SLOTS = JOBS * MESSAGE_SLOTS * MESSAGE_PACKETS
SWITCH = {"mac": "02:4e:52:00:00:01", "ip": "10.0.255.1"}
JOB_IDS = (5, 9)
WRITE_FIRST, WRITE_LAST_WITH_IMMEDIATE, WRITE_ONLY = 0x06, 0x09, 0x0A
LOSSY_OPCODE = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]


EPOCHS = 0b10_1001          # each connection's sequence of sent PSNs (``sent_epochs``), as the monitor gives them:
# unchanged here, so every result's PSN counts (the monitor's tests change them with a restart)


def requester(c):
    # (every other address of words whose sum carries out of 16 bits: a CREDIT's IPv4 checksum folds it)
    ip = f"10.0.1.{c + 1}" if c % 2 == 0 else f"250.{250 + c}.255.{250 - c}"
    return {"mac": 0x02_00_00_00_01_00 + c, "ip": ip, "vlan": 7 if c == 4 else None}


def responder(c):
    return {"mac": 0x02_00_00_00_02_00 + c, "ip": f"10.0.2.{c + 1}", "qpn": 0x300 + c, "rkey": 0xA000 + c}


class Bench(Elaboratable):
    """The emitter over memories holding ``ring`` (stored beats), ``store`` (header entries by slot * N +
    worker) and ``results`` (words by result slot * packet beats + beat), with the deparser behind it."""

    def __init__(self, width, ring, store, results, *, jobs=JOBS, bounded_loss=True):
        self.emitter = Emitter(width=width, workers=WORKERS, jobs=jobs, message_slots=MESSAGE_SLOTS, slots=SLOTS,
                               packet_beats=-(-MTU // (width // 8)), max_frame=MAX_FRAME, bounded_loss=bounded_loss)
        self.deparser = RoceDeparser(width, whole_frames=True)
        self.ring, self.store, self.results = ring, store, results

    def elaborate(self, platform):
        m = Module()
        e = m.submodules.emitter = self.emitter
        d = m.submodules.deparser = self.deparser
        m.submodules.ring = ring = Memory(shape=e.StoredBeat, depth=1 << e.ring_bits, init=self.ring)
        m.submodules.store = store = Memory(shape=StoredHeader, depth=SLOTS * WORKERS,
                                            init=[stored_header_fields(entry["header"]) if "header" in entry else {}
                                                  for entry in self.store])
        m.submodules.own_store = own_store = Memory(shape=8 * OWN_BYTES, depth=SLOTS * WORKERS,
                                                    init=[entry["own"] for entry in self.store])
        m.submodules.results = results = Memory(shape=e.width, depth=2 * SLOTS * e.packet_beats, init=self.results)
        wiring.connect(m, e.ring, ring.read_port())
        wiring.connect(m, e.store_header, store.read_port())
        wiring.connect(m, e.store_own, own_store.read_port())
        word = results.read_port()
        m.d.comb += [word.en.eq(e.results.en), word.addr.eq(e.results.result_slot * e.packet_beats + e.results.beat),
                     e.results.data.eq(word.data)]
        wiring.connect(m, e.hdr, d.hdr)
        wiring.connect(m, e.payload, d.i)
        return m


def words_of(payload, nbytes):
    return [int.from_bytes(payload[i:i + nbytes].ljust(nbytes, b"\0"), "little")
            for i in range(0, max(len(payload), 1), nbytes)]


class Scenario:
    """The descriptors, the memories' contents and the frames the contract sends, in order."""

    def __init__(self, width, rng):
        self.B = B = width // 8
        self.Pb = -(-MTU // B)
        self.rng = rng
        self.ring, self.store = [], [{"own": 0}] * (SLOTS * WORKERS)
        self.results = [0] * (2 * SLOTS * self.Pb)
        self.descriptors, self.headers, self.expected = [], [], []      # expected: (frame, dscp, lossy)
        self.sent = {c: rng.randrange(1 << 24) for c in range(JOBS * WORKERS)}
        self.sent_at_start = dict(self.sent)
        self.sums = 0                   # RESULTS descriptors that wait for a sum

    def descriptor(self, kind, **fields):
        self.descriptors.append({"kind": kind, **fields})

    def forward(self, frame):
        parsed = parse_frame(frame)
        words = words_of(parsed.payload, self.B)
        for i, word in enumerate(words):
            last = i == len(words) - 1
            keep = (1 << (len(parsed.payload) - i * self.B if last else self.B)) - 1
            verdict = (parsed.verdict["len_ok"] << 2 | parsed.verdict["ipv4_csum_ok"] << 1
                       | parsed.verdict["icrc_ok"]) if last else 0
            self.ring.append({"data": word, "keep": keep, "last": last, "verdict": verdict})
        self.headers.append(parsed.header)
        self.descriptor(Emission.FORWARD, beats=len(words))
        self.expected.append((deparse_frame(parsed.header, parsed.payload, parsed.verdict), _dscp(parsed.header), 0))

    def data_frame(self, c, opcode, payload, **fields):
        req, resp = requester(c), responder(c)
        return build_roce_frame(opcode, payload, eth_src=req["mac"], eth_dst=resp["mac"], src_ip=req["ip"],
                                dst_ip=resp["ip"], dest_qp=resp["qpn"], vlan=req["vlan"], dscp=c,
                                # a tagged frame's priority and DEI are its own (the connection fixes the VID)
                                vlan_pcp=5 if req["vlan"] is not None else 0,
                                vlan_dei=1 if req["vlan"] is not None else 0, **fields)

    def sum_of(self, rslot, length):
        words = [self.rng.randrange(1 << (8 * self.B)) for _ in range(-(-length // self.B))]
        for beat, word in enumerate(words):
            self.results[rslot * self.Pb + beat] = word
        return b"".join(w.to_bytes(self.B, "little") for w in words)[:length]

    def store_contribution(self, slot, w, frame):
        parsed = parse_frame(frame)
        own = parsed.payload[:OWN_BYTES]
        self.store[slot * WORKERS + w] = {"header": parsed.header,
                                          "own": int.from_bytes(own, "little")}
        return parsed

    def results_of(self, job, slot, rslot, length, index0):
        """A reliable slot's results: each worker's stored header (a first packet of ``length`` bytes when
        ``index0``) and the sum with its own bytes."""
        total = self.sum_of(rslot, length)
        for w in range(WORKERS):
            c = job * WORKERS + w
            # (a message's first packet, or its last with an immediate: each worker's own, which its result keeps)
            opcode = WRITE_FIRST if index0 else WRITE_LAST_WITH_IMMEDIATE
            contributed = bytes(self.rng.randrange(256) for _ in range(length))
            contribution = self.data_frame(c, opcode, contributed, psn=self.rng.randrange(1 << 24),
                                           reth=(0x1000, 0x55, 4096) if index0 else None,
                                           immdt=None if index0 else self.rng.randrange(1 << 32))
            parsed = self.store_contribution(slot, w, contribution)
            payload = (parsed.payload[:OWN_BYTES] + total[OWN_BYTES:]) if index0 else total
            self.expected.append((deparse_frame(parsed.header, payload), c, 0))
        self.sums += 1
        self.descriptor(Emission.RESULTS, slot=slot, rslot=rslot, index0=index0, beats=-(-length // self.B),
                        length=length, job=job, k=0, workers=WORKERS, all=1)

    def lossy_results(self, job, slot, rslot, length, template, bitmap, *, resend_to=None):
        total = self.sum_of(rslot, length) if resend_to is None else self.lossy_total
        if resend_to is None:
            self.lossy_total = total
            contribution = self.data_frame(job * WORKERS + template, LOSSY_OPCODE,
                                           bytes(self.rng.randrange(256) for _ in range(length)),
                                           psn=0x123, reth=(0x2000, 0x77, length), immdt=0xDEAD)
            self.template = self.store_contribution(slot, template, contribution)
        parsed = self.template
        for w in ([resend_to] if resend_to is not None else range(WORKERS)):
            c = job * WORKERS + w
            req, resp = requester(c), responder(c)
            header = dict(parsed.header, eth_dst=resp["mac"], eth_src=req["mac"],
                          vlan_valid=int(req["vlan"] is not None), vlan_tci=req["vlan"] or 0,
                          ip_src=ip_to_int(req["ip"]), ip_dst=ip_to_int(resp["ip"]), bth_dest_qp=resp["qpn"],
                          bth_psn=(self.sent[c] + 1) % (1 << 24), reth_rkey=resp["rkey"], immdt=bitmap)
            self.sent[c] = header["bth_psn"]
            self.expected.append((deparse_frame(header, parsed.payload[:OWN_BYTES] + total[OWN_BYTES:]),
                                  _dscp(header), 1))
        if resend_to is None:
            self.sums += 1
        self.descriptor(Emission.RESULTS, slot=slot, rslot=rslot, index0=1, beats=-(-length // self.B),
                        length=length, job=job, k=1, workers=WORKERS, all=int(resend_to is None),
                        worker=resend_to or 0, lossy=1, resend=int(resend_to is not None), bitmap=bitmap,
                        template=template)

    def duplicate(self, c, rslot, length):
        """The answer to a duplicate first packet: its own header and the stored sum, its own bytes first."""
        frame = self.data_frame(c, WRITE_FIRST, bytes(self.rng.randrange(256) for _ in range(length)), psn=77,
                                reth=(0x3000, 0x66, 4096))
        parsed = parse_frame(frame)
        total = self.sum_of(rslot, length)
        own = parsed.payload[:OWN_BYTES]
        self.headers.append(parsed.header)
        self.descriptor(Emission.DUPLICATE, rslot=rslot, index0=1, beats=-(-length // self.B), length=length,
                        own=int.from_bytes(own, "little"))
        self.expected.append((deparse_frame(parsed.header, own + total[OWN_BYTES:]), _dscp(parsed.header), 0))

    def credits(self, job, value, worker=None):
        for w in (range(WORKERS) if worker is None else [worker]):
            req = requester(job * WORKERS + w)
            frame = build_control_frame(ControlMessage(ControlType.CREDIT, JOB_IDS[job], w, value),
                                        src_mac=SWITCH["mac"], dst_mac=req["mac"], src_ip=SWITCH["ip"],
                                        dst_ip=req["ip"])
            self.expected.append((frame, CONTROL_DSCP, 0))
        self.descriptor(Emission.CREDITS, job=job, value=value, workers=WORKERS, all=int(worker is None),
                        worker=worker or 0)


def _dscp(header):
    return header["ip_dscp"] if header["ip_version"] in (4, 6) else 0


def scenario(width, seed):
    s = Scenario(width, random.Random(seed))
    rng = s.rng
    s.forward(s.data_frame(0, WRITE_ONLY, bytes(rng.randrange(256) for _ in range(100)), psn=5))
    s.credits(0, 41)
    s.results_of(0, slot=1, rslot=3, length=MTU, index0=1)
    s.forward(bytes.fromhex("ffffffffffff") + bytes(6) + b"\x08\x06" + bytes(46))        # not RoCE: as it is
    s.duplicate(2, rslot=5, length=64)
    s.lossy_results(1, slot=6, rslot=12, length=72, template=1, bitmap=0b011)
    s.forward(s.data_frame(3, 0x11, b"", psn=9, aeth=(0, 4)))                               # a 1-beat ACK
    s.forward(s.data_frame(3, 0x11, b"", psn=10, aeth=(0, 5)))
    s.lossy_results(1, slot=6, rslot=12, length=72, template=1, bitmap=0b011, resend_to=2)
    s.results_of(1, slot=4, rslot=9, length=40, index0=0)
    s.credits(1, 7, worker=2)
    return s


def run_scenario(width, *, seed, idle, backpressure, s=None, beat_clocks=None, **build):
    """``scenario(width, seed)`` (or ``s``) through the bench (``build``: the emitter's ``jobs`` and
    ``bounded_loss``); ``beat_clocks`` gets the clock of every beat out."""
    s = s or scenario(width, seed)
    bench = Bench(width, s.ring, s.store, s.results, **build)
    e, B = bench.emitter, width // 8
    rng = random.Random(seed + 1)
    frames, classes, stalls, psn_used = [], [], [], []
    beat_clocks = [] if beat_clocks is None else beat_clocks
    sums_released, stores_released = [], []

    async def configure_and_offer(ctx):
        ctx.set(e.switch, SwitchAddress.const({"mac": mac_to_int(SWITCH["mac"]), "ip": ip_to_int(SWITCH["ip"]),
                                               "control_port": CONTROL_PORT}))
        for j in range(e.jobs_count):
            ctx.set(e.jobs[j], JobEntry.const({"valid": 1, "id": JOB_IDS[j], "workers": WORKERS}))
        for c in range(e.connections_count):
            req, resp = requester(c), responder(c)
            await write_block(ctx, e.connection_write, "connection", register_writes(
                "connection", c, requester_mac=req["mac"], requester_ip=ip_to_int(req["ip"]),
                requester_vlan=vlan_word(req["vlan"]), responder_mac=resp["mac"], responder_ip=ip_to_int(resp["ip"]),
                responder_qpn=resp["qpn"], responder_rkey=resp["rkey"]))
            ctx.set(e.sent[c], s.sent_at_start[c])
        ctx.set(e.sent_epochs, EPOCHS)
        await ctx.tick()                    # the control frames' checksums are registered
        await send_records(e.descriptors, [e.Descriptor.const(d) for d in s.descriptors], idle=idle, seed=seed)(ctx)

    offer_headers = send_records(e.headers, [ParsedHeader.const(header) for header in s.headers])

    async def own_the_sent_psns(ctx):
        """The owner of the connections' sent PSNs (the monitor): one more for each PSN the emitter uses."""
        async for _, _, valid, conn in ctx.tick().sample(e.psn_used.valid, e.psn_used.conn):
            if valid:
                psn_used.append(conn)
                ctx.set(e.sent[conn], (ctx.get(e.sent[conn]) + 1) % (1 << 24))

    async def release_sums(ctx):
        """Hold the sums back a while: no result that needs one may leave before it is done."""
        if not s.sums:
            return
        await ctx.tick().repeat(400)
        sums_released.append(len(frames))
        for _ in range(s.sums):
            ctx.set(e.sum_done.valid, 1)
            await ctx.tick()
            ctx.set(e.sum_done.valid, 0)
            await ctx.tick().repeat(rng.randrange(1, 30))

    async def release_stores(ctx):
        """Hold back the word that a RESULTS descriptor's headers are in the store longer still (the records'
        ``stored``, one a descriptor): no result may be read from the store before it."""
        if not s.sums:
            return
        await ctx.tick().repeat(700)
        stores_released.append(len(frames))
        for _ in range(s.sums):
            ctx.set(e.stored, 1)
            await ctx.tick()
            ctx.set(e.stored, 0)
            await ctx.tick().repeat(rng.randrange(1, 30))

    async def take_classes(ctx):
        async for _, _, valid, ready, payload in ctx.tick().sample(e.classes.valid, e.classes.ready,
                                                                   e.classes.payload):
            if valid and ready:
                classes.append((int(payload.frame_class.dscp), int(payload.frame_class.lossy),
                                int(payload.eth_dst)))

    async def take_frames(ctx):
        current, gaps, clock = bytearray(), 0, 0
        o = bench.deparser.o
        while True:
            ready = rng.random() >= backpressure
            ctx.set(o.ready, ready)
            ctx.set(e.classes.ready, 1)
            valid = ctx.get(o.valid)
            if ready and valid:
                beat_clocks.append(clock)
                beat = ctx.get(o.payload)
                current += int(beat.data).to_bytes(B, "little")[:int(beat.keep).bit_length()]
                if beat.last:
                    frames.append(bytes(current))
                    stalls.append(gaps)
                    current, gaps = bytearray(), 0
            elif current:
                gaps += 1
            await ctx.tick()
            clock += 1

    sim = Simulator(bench)
    sim.add_clock(1e-8)
    sim.add_testbench(configure_and_offer)
    for process in (offer_headers, own_the_sent_psns, release_sums, release_stores, take_classes, take_frames):
        sim.add_testbench(process, background=True)

    async def until_done(ctx):
        for _ in range(20_000):
            if len(frames) == len(s.expected):
                await ctx.tick().repeat(20)
                return
            await ctx.tick()
    sim.add_testbench(until_done)
    sim.run()
    return s, frames, classes, stalls, psn_used, (sums_released, stores_released)


def frames_before_first_sum(s):
    count = 0
    for d in s.descriptors:
        if d["kind"] == Emission.RESULTS and not d.get("resend"):
            return count
        count += WORKERS if d.get("all") else 1         # one frame per worker, or one
    return count


# (each run is some 4 s of one core, most of it elaboration: the fast tier takes one run at each width)
@pytest.mark.parametrize("width, idle, backpressure", [
    (64, 0.3, 0.4), (512, 0.0, 0.0),
    pytest.param(64, 0.0, 0.0, marks=pytest.mark.slow(minutes=0.1)),
    pytest.param(512, 0.3, 0.4, marks=pytest.mark.slow(minutes=0.1))])
def test_descriptors_become_the_contracts_frames(width, idle, backpressure):
    s, frames, classes, stalls, psn_used, released = run_scenario(width, seed=width, idle=idle,
                                                                  backpressure=backpressure)
    assert len(frames) == len(s.expected), f"{len(frames)} frames out of {len(s.expected)}"
    for index, (got, (want, dscp, lossy)) in enumerate(zip(frames, s.expected, strict=True)):
        assert got == want, f"frame {index} differs from the contract's"
        # (each class with its frame's destination MAC, for the forwarding table)
        want_class = (dscp, lossy, int.from_bytes(want[:6], "big"))
        assert classes[index] == want_class, f"frame {index}: class {classes[index]}, not {want_class}"
    assert released == ([frames_before_first_sum(s)], [frames_before_first_sum(s)]), \
        "a result left before its sum was done or its headers were stored"
    # every bounded-loss result used its connection's next PSN, once
    assert sorted(psn_used) == sorted([WORKERS + w for w in range(WORKERS)] + [WORKERS + 2])
    if backpressure == 0:
        assert stalls == [0] * len(frames), "a frame paused inside"


@pytest.mark.parametrize("width", [pytest.param(64, marks=pytest.mark.slow(minutes=0.1)), 512])
def test_back_to_back_acks_leave_one_beat_a_clock(width):
    """Frames that go on, offered back to back with no backpressure, leave at one beat a clock with no idle
    clock between them: at 512 bits each ACK is one beat, so the emitter and the deparser take a frame a
    clock (the deparser starts a frame only once its payload is there: the payloads must lead)."""
    s = Scenario(width, random.Random(width))
    for n in range(60):
        s.forward(s.data_frame(n % (JOBS * WORKERS), 0x11, b"", psn=n, aeth=(0, n)))
    beat_clocks = []
    _, frames, *_ = run_scenario(width, seed=width, idle=0.0, backpressure=0.0, s=s, beat_clocks=beat_clocks)
    assert frames == [want for want, _, _ in s.expected]
    # (the first frames leave while the later ones are still on their way in: count from the tenth)
    tail = beat_clocks[len(beat_clocks) // 6:]
    assert tail == list(range(tail[0], tail[0] + len(tail))), "an idle clock between frames out"


@pytest.mark.parametrize("width", [64, 512])
def test_one_job_without_the_bounded_loss_class(width):
    """The emitter of a build of one job without the bounded-loss class (its descriptors' job index and
    bounded-loss fields taken as 0: the board switch's) sends the contract's frames for every reliable kind:
    frames that go on, a slot's results to every worker (each addressed with its own connection), a
    duplicate's answer and CREDITs to the job and to one worker."""
    s = Scenario(width, random.Random(width + 7))
    rng = s.rng
    s.forward(s.data_frame(1, WRITE_ONLY, bytes(rng.randrange(256) for _ in range(90)), psn=3))
    s.results_of(0, slot=1, rslot=3, length=MTU, index0=1)
    s.credits(0, 12)
    s.duplicate(2, rslot=5, length=48)
    s.forward(s.data_frame(0, 0x11, b"", psn=4, aeth=(0, 2)))
    s.results_of(0, slot=2, rslot=4, length=40, index0=0)
    s.credits(0, 3, worker=1)
    s, frames, classes, stalls, psn_used, _ = run_scenario(width, seed=width, idle=0.2, backpressure=0.2, s=s,
                                                           jobs=1, bounded_loss=False)
    assert frames == [want for want, _, _ in s.expected]
    assert classes == [(dscp, lossy, int.from_bytes(want[:6], "big")) for want, dscp, lossy in s.expected]
    assert psn_used == []
