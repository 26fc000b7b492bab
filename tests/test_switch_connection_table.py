"""amaranth.sim unit test of hw/switch/connection_table.py (``ConnectionTable``): behind ``SwitchRegisters``'s
``connection_write``, random writes through the ``csr`` port (words of every connection's registers, words
between them that are no register, words of the other blocks) leave the read showing, at every clock and for
whichever connection it names, the registers' values as the register map's ``RegisterFile`` keeps them
(the golden model) and as ``SwitchRegisters.connections`` holds them, and the requester's IPv4 address's
ones' complement sum of its 16-bit words as RFC 1071 adds them; with ``read_ahead``, for the connection it
named a clock before (the one it names now another)."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from netreduce.hw.egress import EgressQueues
from netreduce.hw.switch.connection_table import ConnectionTable
from netreduce.hw.switch.registers import SwitchRegisters
from netreduce.registers import CONNECTION, RegisterFile, block

TABLE_REGISTERS = ("requester_mac", "requester_ip", "requester_vlan", "responder_mac", "responder_qpn",
                   "responder_rkey")


def registers_field(entry, name):
    """``SwitchRegisters.connections[c]``'s field of the register ``name``."""
    for side in ("requester", "responder"):
        if name.startswith(side + "_") and name[len(side) + 1:] in ("mac", "ip", "port", "vlan"):
            return entry[side][name[len(side) + 1:]]
    return entry[name]


def ones_complement_sum(ip):
    """RFC 1071: the 16-bit words added with every carry out of bit 15 added back in."""
    total = (ip >> 16) + (ip & 0xFFFF)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def test_sums_are_of_the_tables_32_bit_registers():
    for sums in (("responder_ip",), ("requester_mac",)):
        with pytest.raises(ValueError, match="sums are of the table's registers of 32 bits"):
            ConnectionTable(connections=2, registers=("requester_mac", "requester_ip"), sums=sums)


@pytest.mark.parametrize("read_ahead", [False, True])
@pytest.mark.parametrize("jobs, workers", [(1, 1), (1, 3), (2, 2)])
def test_every_read_shows_its_connections_registers_at_every_clock(jobs, workers, read_ahead):
    C = jobs * workers
    stage = EgressQueues(64, queues=2, depth_beats=256, max_frame=1024)
    stage._MustUse__silence = True      # only its configuration's and counters' shapes are used
    regs = SwitchRegisters(jobs=jobs, workers=workers, forwarding_entries=1, mtu=1024, increment_bits=2,
                           egress=stage, ports=1)
    table = ConnectionTable(connections=C, registers=TABLE_REGISTERS, sums=("requester_ip",), read_ahead=read_ahead)
    m = Module()
    m.submodules.regs, m.submodules.table = regs, table
    m.d.comb += table.write.eq(regs.connection_write)
    model = RegisterFile(regs.parameters)
    rng = random.Random(C)
    # word addresses: every word of every connection's stride (registers and gaps), and some of other blocks
    words = [CONNECTION.base + CONNECTION.stride * c + offset for c in range(C) for offset in range(CONNECTION.stride)]
    words += [CONNECTION.base + CONNECTION.stride * C, block("job").base + 1, block("switch").base]
    checked = []

    async def bench(ctx):
        pending = None          # the write the port took in the clock before (the registers take it now)
        for step in range(120 * C):
            write = (rng.choice(words), rng.getrandbits(32)) if rng.random() < 0.8 else None
            if write is not None:
                ctx.set(regs.csr.addr, write[0])
                ctx.set(regs.csr.wdata, write[1])
            ctx.set(regs.csr.we, write is not None)
            ctx.set(table.conn, rng.randrange(C))
            await ctx.tick()
            if pending is not None:
                model.write(*pending)
            pending = write
            c = ctx.get(table.conn)
            if read_ahead and C > 1:        # (the entry is of the connection named before the clock)
                ctx.set(table.conn, (c + rng.randrange(1, C)) % C)
            entry, held = ctx.get(table.entry), ctx.get(regs.connections[c])
            for name in TABLE_REGISTERS:
                assert entry[name] == model["connection", c, name], (step, c, name)
                assert entry[name] == registers_field(held, name), (step, c, name)
                checked.append((c, name))
            assert entry["requester_ip_sum"] == ones_complement_sum(model["connection", c, "requester_ip"]), step

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert set(checked) == {(c, name) for c in range(C) for name in TABLE_REGISTERS}
