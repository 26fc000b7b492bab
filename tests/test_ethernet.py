"""amaranth.sim unit test of netreduce.hw.ethernet.EthernetPort: a board's port from GMII to frame streams
and back, across its three clock domains (receive and transmit at 125 MHz, ``sync`` slower).

The port's frames out are fed back into it, so every good frame that arrives on the GMII receive side
must leave on the transmit side, whole, padded to 60 bytes, with its FCS, and every bad one (wrong FCS,
``rx_er``) must not; the counters say which.
"""

import random
import zlib

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from netreduce.hw.ethernet import EthernetPort
from netreduce.hw.mac import IFG_CLOCKS, PREAMBLE, SFD


def wire(frame):
    return bytes([PREAMBLE] * 7 + [SFD]) + frame + zlib.crc32(frame).to_bytes(4, "little")


@pytest.mark.parametrize("width, sync_ns", [(64, 25.0), (512, 40.0)])
def test_port_echoes_good_frames_and_drops_bad_ones(width, sync_ns):
    rng = random.Random(width)
    frames = [rng.randbytes(rng.choice([60, 64, 100, 333, 1000])) for _ in range(8)]
    bad = {2: "fcs", 5: "error"}
    top = Module()
    top.domains.rx = ClockDomain("rx")
    top.domains.tx = ClockDomain("tx")
    top.submodules.port = port = EthernetPort(width, max_frame=1518)
    top.d.comb += [port.i.valid.eq(port.o.valid), port.i.payload.eq(port.o.payload),
                   port.o.ready.eq(port.i.ready)]
    bursts, counts = [], {}

    async def receive(ctx):
        for n, frame in enumerate(frames):
            data = bytearray(wire(frame))
            if bad.get(n) == "fcs":
                data[20] ^= 0x40
            for k, byte in enumerate(data):
                ctx.set(port.rx_dv, 1)
                ctx.set(port.rxd, byte)
                ctx.set(port.rx_er, bad.get(n) == "error" and k == 30)
                await ctx.tick("rx")
            ctx.set(port.rx_dv, 0)
            ctx.set(port.rx_er, 0)
            await ctx.tick("rx").repeat(IFG_CLOCKS)
        await ctx.tick("rx").repeat(3000)
        counts.update({name: ctx.get(getattr(port, name)) for name in (
            "rx_good", "rx_drops_fcs", "rx_drops_error", "rx_drops_full", "tx_frames", "tx_underruns")})

    async def transmit(ctx):
        current = None
        async for _, _, en, er, d in ctx.tick("tx").sample(port.tx_en, port.tx_er, port.txd):
            if en:
                current = (current or bytearray()) + bytes([d])
                assert not er
            elif current is not None:
                bursts.append(bytes(current))
                current = None

    sim = Simulator(top)
    sim.add_clock(8e-9, domain="rx")
    sim.add_clock(8e-9, domain="tx", phase=3e-9)
    sim.add_clock(sync_ns * 1e-9, domain="sync")
    sim.add_testbench(receive)
    sim.add_process(transmit)
    sim.run()
    assert bursts == [wire(f) for n, f in enumerate(frames) if n not in bad]
    assert counts == {"rx_good": 6, "rx_drops_fcs": 1, "rx_drops_error": 1, "rx_drops_full": 0, "tx_frames": 6,
                      "tx_underruns": 0}
