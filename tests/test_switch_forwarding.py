"""amaranth.sim unit test of hw/switch/forwarding.py (``ForwardingTable``) against the golden model: random
tables (duplicate MACs, entries not valid, entries and default ports naming ports the build lacks) are
written into the golden model's register file, and for each destination MAC (every MAC of the table and
others) the RTL's port is the one ``SwitchConfig.port_of`` gives for ``config_from_registers``' reading of
those registers, at both widths."""

import random

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


@pytest.mark.parametrize("width, ports", [(64, 3), (512, 2)])
def test_the_port_of_each_destination_is_the_models(width, ports):
    rng = random.Random(width + ports)
    dut = ForwardingTable(width=width, ports=ports, entries=ENTRIES)
    build = {"jobs": 1, "workers": 1, "ports": ports, "forwarding_entries": ENTRIES, "max_frame": 2048}
    checked = []

    async def bench(ctx):
        for entries, default_port, pool in tables(rng, ports):
            registers = RegisterFile(build)
            for e, entry in enumerate(entries):
                for name, value in entry.items():
                    registers.values["forwarding", e, name] = value
            registers.values["switch", 0, "default_port"] = default_port
            model = config_from_registers(registers, build)
            for e, entry in enumerate(entries):
                ctx.set(dut.entries[e], ForwardingEntry.const({"valid": entry["enable"], "mac": entry["mac"],
                                                               "port": entry["port"]}))
            ctx.set(dut.default_port, default_port)
            for mac in pool + [rng.randrange(1 << 48)]:
                rest = rng.randrange(1 << (width - 48))       # the bytes of the beat after the MAC
                ctx.set(dut.beat, int.from_bytes(mac.to_bytes(6, "big"), "little") | rest << 48)
                await ctx.delay(1e-9)
                got = ctx.get(dut.port)
                assert got == model.port_of(mac), f"{mac:012x} left by port {got}, not {model.port_of(mac)}"
                checked.append(got)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert len(set(checked)) == ports, "every port of the build was chosen in some case"
