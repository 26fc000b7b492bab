"""amaranth.sim unit test of hw/switch/forwarding.py (``ForwardingTable``) against the golden model: random
tables (duplicate MACs, entries not valid, entries and default ports naming ports the build lacks) are
written into the golden model's register file, and each frame's class, offered with a destination MAC (every
MAC of the table and others), comes out with the port that ``SwitchConfig.port_of`` gives for
``config_from_registers``' reading of those registers, its DSCP and class unchanged, in order; under random
idle clocks and backpressure, and one class a clock when nothing waits."""

import random
from itertools import pairwise

import pytest
from amaranth.sim import Simulator

from netreduce.hw.switch.forwarding import ForwardingTable
from netreduce.hw.switch.registers import ForwardingEntry
from netreduce.registers import RegisterFile
from netreduce.sim.switch_model import config_from_registers

ENTRIES = 6


def tables(rng, ports):
    """Register contents: each entry's enable, MAC (from a small pool, so that MACs repeat) and port (some
    beyond the build's), and a default port (sometimes beyond it)."""
    pool = [rng.randrange(1 << 48) for _ in range(4)]
    for _ in range(12):
        entries = [{"enable": int(rng.random() < 0.8), "mac": rng.choice(pool), "port": rng.randrange(ports + 2)}
                   for _ in range(ENTRIES)]
        yield entries, rng.randrange(ports + 2), pool


def run(ports, idle, backpressure, seed):
    """Each table in turn: its frames' classes through the stage. Returns (offered, taken, clocks): the
    classes offered with the port the model expects, the classes taken, and the clock each was taken."""
    rng = random.Random(seed)
    dut = ForwardingTable(ports=ports, entries=ENTRIES)
    build = {"jobs": 1, "workers": 1, "ports": ports, "forwarding_entries": ENTRIES, "max_frame": 2048}
    offered, taken, clocks, done = [], [], [], []

    async def offer(ctx):
        for entries, default_port, pool in tables(rng, ports):
            registers = RegisterFile(build)
            for e, entry in enumerate(entries):
                for name, value in entry.items():
                    registers.values["forwarding", e, name] = value
            registers.values["switch", 0, "default_port"] = default_port
            model = config_from_registers(registers, build)
            await ctx.tick().until(~dut.o.valid)           # (the last table's classes are out)
            await ctx.tick().repeat(3)
            for e, entry in enumerate(entries):
                ctx.set(dut.entries[e], ForwardingEntry.const({"valid": entry["enable"], "mac": entry["mac"],
                                                               "port": entry["port"]}))
            ctx.set(dut.default_port, default_port)
            for mac in pool + [rng.randrange(1 << 48)] + pool:
                while rng.random() < idle:
                    ctx.set(dut.i.valid, 0)
                    await ctx.tick()
                frame_class = {"dscp": rng.randrange(64), "lossy": rng.randrange(2), "port": 0}
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"frame_class": frame_class, "eth_dst": mac})
                offered.append((frame_class["dscp"], frame_class["lossy"], model.port_of(mac)))
                await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(4)
        done.append(True)

    async def take(ctx):
        clock = 0
        while not done:
            ready = rng.random() >= backpressure
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if ready and valid:
                taken.append((payload.dscp, payload.lossy, payload.port))
                clocks.append(clock)
            clock += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(offer)
    sim.add_testbench(take, background=True)
    sim.run()
    return offered, taken, clocks


@pytest.mark.parametrize("ports", [3, 2])
def test_each_class_leaves_with_the_models_port(ports):
    offered, taken, _ = run(ports, idle=0.3, backpressure=0.3, seed=ports)
    assert taken == offered
    assert len({port for _, _, port in taken}) == ports, "every port of the build was chosen in some case"


def test_a_class_a_clock_when_nothing_waits():
    offered, taken, clocks = run(2, idle=0.0, backpressure=0.0, seed=7)
    assert taken == offered
    # within each table's run of 9 back-to-back classes, one leaves every clock
    runs = [clocks[i:i + 9] for i in range(0, len(clocks), 9)]
    assert all(b - a == 1 for run_clocks in runs for a, b in pairwise(run_clocks))
