"""amaranth.sim unit tests of netreduce.hw.mac: the GMII MAC's receive and transmit sides.

The receive side gets wire bytes built here from the standard (preamble, SFD, the frame, its FCS from
``zlib.crc32``) with random preamble lengths and gaps; the frames, and their FCS, are scapy's and
random bytes. It must give every good frame's bytes and a good end marker, and drop (with a bad end
marker and the right counter) frames with a wrong FCS, ``rx_er``, too short, too long, and ignore a
broken preamble. The transmit side's wire bytes are parsed the same way: preamble, SFD, the frame
padded to 60 bytes, a right FCS, at least 12 idle clocks between frames; an underrun ends the frame
with ``tx_er``. And the two in a loop.
"""

import random
import zlib

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from netreduce.hw.mac import IFG_CLOCKS, PREAMBLE, SFD, GmiiRx, GmiiTx


def fcs(frame):
    return zlib.crc32(frame).to_bytes(4, "little")


def wire(frame, preamble=7, with_fcs=True):
    return bytes([PREAMBLE] * preamble + [SFD]) + frame + (fcs(frame) if with_fcs else b"")


def random_frames(rng, count, sizes=(60, 61, 64, 100, 333, 1514)):
    frames = []
    for n in range(count):
        size = rng.choice(sizes)
        packet = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2") / \
            UDP(sport=1000 + n, dport=4791)
        head = bytes(packet)
        frames.append(head + rng.randbytes(max(0, size - len(head))))
    return frames


def received_frames(rx, got):
    """A process that appends each frame out of ``rx`` (a ``GmiiRx``) to ``got`` as (bytes, bad)."""
    async def collect(ctx):
        current = bytearray()
        async for _, _, valid, beat in ctx.tick().sample(rx.o.valid, rx.o.payload):
            if valid and beat.end:
                got.append((bytes(current), beat.bad))
                current = bytearray()
            elif valid:
                current.append(beat.data)
    return collect


RX_COUNTERS = ("frames_good", "drops_fcs", "drops_runt", "drops_error", "drops_oversize", "preamble_errors")


def rx_with_counters(dut, bursts, gaps):
    """Drive ``bursts`` (each a list of (rxd, rx_er) bytes with rx_dv high) with ``gaps`` idle clocks before
    each; the frames (bytes, bad) from ``o``, and the counters at the end."""
    got, values = [], {}

    async def drive(ctx):
        for burst, gap in zip(bursts, gaps, strict=True):
            ctx.set(dut.rx_dv, 0)
            await ctx.tick().repeat(gap)
            for byte, er in burst:
                ctx.set(dut.rx_dv, 1)
                ctx.set(dut.rxd, byte)
                ctx.set(dut.rx_er, er)
                await ctx.tick()
            ctx.set(dut.rx_er, 0)
        ctx.set(dut.rx_dv, 0)
        await ctx.tick().repeat(5)
        values.update({name: ctx.get(getattr(dut, name)) for name in RX_COUNTERS})

    sim = Simulator(dut)
    sim.add_clock(8e-9)
    sim.add_testbench(drive)
    sim.add_process(received_frames(dut, got))
    sim.run()
    return got, values


def test_rx_good_frames_with_any_preamble_and_gap():
    rng = random.Random(1)
    frames = random_frames(rng, 12)
    bursts = [[(b, 0) for b in wire(f, preamble=rng.randint(0, 7))] for f in frames]
    got, values = rx_with_counters(GmiiRx(), bursts, [rng.randint(1, 12) for _ in frames])
    assert got == [(f, 0) for f in frames]
    assert values["frames_good"] == len(frames) and sum(values.values()) == len(frames)


def test_rx_drops_bad_frames_and_counts_each_once():
    rng = random.Random(2)
    good = random_frames(rng, 6, sizes=(64, 200))
    cases = []
    for f in good:
        cases.append(("good", [(b, 0) for b in wire(f)]))
    broken = bytearray(good[0])
    broken[30] ^= 0x10                                                         # the FCS is good[0]'s
    cases.append(("fcs", [(b, 0) for b in wire(bytes(broken), with_fcs=False) + fcs(good[0])]))
    errored = [(b, 0) for b in wire(good[1])]
    errored[40] = (errored[40][0], 1)
    cases.append(("error", errored))
    cases.append(("runt", [(b, 0) for b in wire(good[2][:59])]))            # 59 + 4 = 63 bytes
    cases.append(("oversize", [(b, 0) for b in wire(rng.randbytes(300))]))
    cases.append(("preamble", [(b, 0) for b in bytes([PREAMBLE] * 3 + [0x00]) + good[3] + fcs(good[3])]))
    cases.append(("tiny", [(b, 0) for b in wire(b"\x01\x02")]))               # 6 bytes: a runt
    rng.shuffle(cases)
    got, values = rx_with_counters(GmiiRx(max_frame=256), [c for _, c in cases], [3] * len(cases))
    expected = []
    for kind, burst in cases:
        frame = bytes(b for b, _ in burst)[bytes(b for b, _ in burst).index(SFD) + 1:-4] \
            if kind != "preamble" else None
        if kind == "good":
            expected.append((frame, 0))
        elif kind == "oversize":
            expected.append((frame[:256], 1))
        elif kind != "preamble":
            expected.append((frame, 1))
    assert got == expected
    assert values == {"frames_good": 6, "drops_fcs": 1, "drops_runt": 2, "drops_error": 1, "drops_oversize": 1,
                      "preamble_errors": 1}


def run_tx(frames, *, stall_after=None, idle_between=0, clocks=None):
    """Offer ``frames`` to ``GmiiTx``; ``stall_after``: (frame index, bytes) after which the source stops
    offering for 3 clocks (an underrun). Returns the wire: a list of (tx_en, tx_er, txd) per clock."""
    dut = GmiiTx()
    trace = []

    async def source(ctx):
        for n, frame in enumerate(frames):
            for index, byte in enumerate(frame):
                if stall_after == (n, index):
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick().repeat(3)
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": byte, "last": index == len(frame) - 1})
                await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            if idle_between:
                await ctx.tick().repeat(idle_between)

    async def watch(ctx):
        async for _, _, en, er, d in ctx.tick().sample(dut.tx_en, dut.tx_er, dut.txd):
            trace.append((en, er, d))

    sim = Simulator(dut)
    sim.add_clock(8e-9)
    sim.add_testbench(source)
    sim.add_process(watch)
    total = clocks or sum(max(len(f), 60) + 8 + 4 + IFG_CLOCKS + idle_between + 4 for f in frames) + 40
    sim.run_until(8e-9 * total)
    return dut, trace


def bursts_of(trace):
    """(bytes, any tx_er, idle clocks before) of each burst of tx_en."""
    bursts, current, errored, idle = [], None, False, 0
    for en, er, d in trace:
        if en:
            if current is None:
                current, errored, before = bytearray(), False, idle
            current.append(d)
            errored |= bool(er)
            idle = 0
        else:
            if current is not None:
                bursts.append((bytes(current), errored, before))
                current = None
            idle += 1
    return bursts


def test_tx_frames_padded_with_fcs_and_gap():
    rng = random.Random(3)
    frames = [rng.randbytes(n) for n in (1, 59, 60, 61, 64, 200)] + random_frames(rng, 2, sizes=(1514,))
    _, trace = run_tx(frames)
    bursts = bursts_of(trace)
    assert len(bursts) == len(frames)
    for (sent, errored, _), frame in zip(bursts, frames, strict=True):
        padded = frame + bytes(max(0, 60 - len(frame)))
        assert sent == wire(padded) and not errored
    assert all(before == IFG_CLOCKS for _, _, before in bursts[1:])      # back to back: the gap exactly


def test_tx_underrun_ends_the_frame_with_an_error():
    rng = random.Random(4)
    frames = [rng.randbytes(100), rng.randbytes(80)]
    dut, trace = run_tx(frames, stall_after=(0, 50))
    bursts = bursts_of(trace)
    assert len(bursts) == 2
    assert bursts[0][1] and len(bursts[0][0]) == 8 + 50 + 1           # the errored byte ends it
    assert bursts[1][0] == wire(frames[1]) and not bursts[1][1]


@pytest.mark.parametrize("max_frame", [1518])
def test_tx_into_rx_loop(max_frame):
    """GmiiTx's wire straight into GmiiRx: every frame arrives good, padded to 60 bytes."""
    rng = random.Random(5)
    frames = [rng.randbytes(n) for n in (14, 60, 99)] + random_frames(rng, 3)
    top = Module()
    top.submodules.tx = tx = GmiiTx()
    top.submodules.rx = rx = GmiiRx(max_frame=max_frame)
    top.d.comb += [rx.rx_dv.eq(tx.tx_en), rx.rx_er.eq(tx.tx_er), rx.rxd.eq(tx.txd)]
    got = []

    async def source(ctx):
        for frame in frames:
            for index, byte in enumerate(frame):
                ctx.set(tx.i.valid, 1)
                ctx.set(tx.i.payload, {"data": byte, "last": index == len(frame) - 1})
                await ctx.tick().until(tx.i.ready)
            ctx.set(tx.i.valid, 0)

    sim = Simulator(top)
    sim.add_clock(8e-9)
    sim.add_testbench(source)
    sim.add_process(received_frames(rx, got))
    sim.run_until(8e-9 * (sum(max(len(f), 60) + 30 for f in frames) + 50))
    assert got == [(f + bytes(max(0, 60 - len(f))), 0) for f in frames]


def test_parameter_error():
    with pytest.raises(ValueError, match="max_frame"):
        GmiiRx(max_frame=10)
