"""``hw.ram``: its FIFOs and read port against Amaranth's own, clock for clock."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from netreduce.hw.ram import NO_COLLISION, BlockRAMFIFO, BlockRAMReadPort, RegisterFIFO

PORTS = ("w_rdy", "r_rdy", "r_data", "level")


def simulate(dut, testbench):
    """Run ``testbench`` on ``dut`` with a clock, to its end."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("depth", [3, 4, 7, 64])
@pytest.mark.parametrize("seed", [1, 2])
def test_block_ram_fifo_behaves_as_sync_fifo_buffered(depth, seed):
    """Random writes and reads (both ways busy, each side idle at times, runs of each): every output of
    the two FIFOs is equal at every clock, and the words come out in order."""
    m = Module()
    m.submodules.ours = ours = BlockRAMFIFO(width=12, depth=depth)
    m.submodules.reference = reference = SyncFIFOBuffered(width=12, depth=depth)
    rng = random.Random(seed)
    read_back = []

    async def testbench(ctx):
        word = 0
        for clock in range(3000):
            phase = (clock // 200) % 3          # writes outpace reads, then the other way, then even
            w_en = rng.random() < (0.9, 0.3, 0.6)[phase]
            r_en = rng.random() < (0.3, 0.9, 0.6)[phase]
            for fifo in (ours, reference):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.w_data, word)
                ctx.set(fifo.r_en, r_en)
            for port in PORTS:
                assert ctx.get(getattr(ours, port)) == ctx.get(getattr(reference, port)), (clock, port)
            if w_en and ctx.get(ours.w_rdy):
                word = (word + 1) % 4096
            if r_en and ctx.get(ours.r_rdy):
                read_back.append(ctx.get(ours.r_data))
            await ctx.tick()

    simulate(m, testbench)
    assert read_back == [i % 4096 for i in range(len(read_back))]
    assert len(read_back) > 1000


def test_a_block_ram_fifo_holds_three_entries_at_least():
    with pytest.raises(ValueError, match="at least 3"):
        BlockRAMFIFO(width=8, depth=2)


@pytest.mark.parametrize("depth, seed", [(2, 1), (2, 2), (2, 3), (1, 4), (1, 5)])
def test_register_fifo_keeps_order_and_takes_a_word_every_clock(depth, seed):
    """Random writes and reads: the words come out in order, ``level`` counts them, ``w_rdy`` and ``r_rdy``
    say what a FIFO of ``depth`` entries says; with both sides busy, a word goes through every clock (two
    entries) or every other clock (one)."""
    dut = RegisterFIFO(width=12, depth=depth)
    rng = random.Random(seed)
    read_back, through = [], []

    async def testbench(ctx):
        word, held = 0, 0
        for clock in range(3000):
            phase = (clock // 200) % 4
            w_en = phase == 3 or rng.random() < (0.9, 0.3, 0.6)[phase % 3]
            r_en = phase == 3 or rng.random() < (0.3, 0.9, 0.6)[phase % 3]
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_data, word)
            ctx.set(dut.r_en, r_en)
            assert ctx.get(dut.level) == held
            # (one entry: a word read leaves its register empty only in the next clock)
            assert ctx.get(dut.w_rdy) == (held < depth)
            assert ctx.get(dut.r_rdy) == (held > 0)
            wrote, read = w_en and held < depth, r_en and held > 0
            if read:
                read_back.append(ctx.get(dut.r_data))
            if phase == 3 and clock % 200 >= 4:
                through.append((wrote, read))
            word = (word + wrote) % 4096
            held += wrote - read
            await ctx.tick()

    simulate(dut, testbench)
    assert read_back == [i % 4096 for i in range(len(read_back))]
    assert through
    if depth == 2:
        assert all(wrote and read for wrote, read in through), \
            "a word did not go through every clock with both sides busy"
    else:
        reads = [read for _, read in through]
        assert abs(sum(reads) - len(reads) / 2) <= 3 * 4, "one entry did not pass a word every other clock"


def test_block_ram_read_port_reads_as_a_synchronous_port():
    """Random writes, and reads with and without ``en``, collisions included: the port's ``data`` equals
    that of Amaranth's synchronous read port of the same memory at every clock."""
    m = Module()
    m.submodules.memory = memory = Memory(shape=12, depth=16, init=[], attrs=NO_COLLISION)
    m.submodules.ours = ours = BlockRAMReadPort(memory)
    reference, write = memory.read_port(), memory.write_port()
    rng = random.Random(7)

    async def testbench(ctx):
        for clock in range(2000):
            address, en = rng.randrange(16), rng.random() < 0.7
            ctx.set(write.addr, rng.randrange(16) if rng.random() < 0.8 else address)
            ctx.set(write.data, rng.randrange(4096))
            ctx.set(write.en, rng.random() < 0.5)
            for port in (ours, reference):
                ctx.set(port.addr, address)
                ctx.set(port.en, en)
            assert ctx.get(ours.data) == ctx.get(reference.data), clock
            await ctx.tick()

    simulate(m, testbench)
