"""``hw.ram``: its FIFOs and read port against Amaranth's own, clock for clock."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from netreduce.hw.ram import NO_COLLISION, BlockRAMFIFO, BlockRAMReadPort, RegisterFIFO, SerialBlockRAMFIFO

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


@pytest.mark.parametrize("depth, words, width", [(2, 2, 12), (5, 4, 14), (33, 4, 16), (8, 3, 7)])
@pytest.mark.parametrize("seed", [1, 2])
def test_serial_block_ram_fifo_keeps_order_and_room(depth, words, width, seed):
    """Random writes (an entry held until taken, as a stream holds it) and reads, each side idle at times:
    the entries come out in order and whole; ``level`` counts what is in; ``w_rdy`` only with room for
    ``depth`` entries in all and only after an entry's ``words`` clocks of ``w_en``; ``r_rdy`` and ``w_rdy``
    never change with the clock's own ``w_en`` and ``r_en``."""
    dut = SerialBlockRAMFIFO(width=width, depth=depth, words=words)
    rng = random.Random(seed)
    read_back = []

    async def testbench(ctx):
        entry, inside, presented = 1, 0, 0
        for clock in range(4000):
            phase = (clock // 300) % 3          # writes outpace reads, then the other way, then even
            w_en = presented > 0 or rng.random() < (0.9, 0.3, 0.6)[phase]
            r_en = rng.random() < (0.3, 0.9, 0.6)[phase]
            ctx.set(dut.w_data, entry)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            w_rdy, r_rdy = ctx.get(dut.w_rdy), ctx.get(dut.r_rdy)
            for w_other, r_other in ((not w_en, not r_en), (w_en, r_en)):       # no path from the enables
                ctx.set(dut.w_en, w_other)
                ctx.set(dut.r_en, r_other)
                assert (ctx.get(dut.w_rdy), ctx.get(dut.r_rdy)) == (w_rdy, r_rdy), clock
            assert ctx.get(dut.level) == inside
            presented = presented + 1 if w_en else presented
            if w_en and w_rdy:
                assert presented >= words and inside < depth, (clock, presented, inside)
                entry = entry % ((1 << width) - 1) + 1
                presented, inside = 0, inside + 1
            if r_en and r_rdy:
                read_back.append(ctx.get(dut.r_data))
                inside -= 1
            await ctx.tick()

    simulate(dut, testbench)
    top = (1 << width) - 1
    assert read_back == [i % top + 1 for i in range(len(read_back))]
    assert len(read_back) > 4000 // (words + 1) // 3


@pytest.mark.parametrize("words", [2, 4])
def test_serial_block_ram_fifo_passes_an_entry_every_words_plus_one_clocks(words):
    """Both sides always busy: an entry in every ``words`` clocks until the memory is full, one out every
    ``words + 1`` clocks; filled alone, it holds ``depth`` entries, the last in the output register."""
    depth = 6
    dut = SerialBlockRAMFIFO(width=20, depth=depth, words=words)
    taken_in, taken_out = [], []

    async def testbench(ctx):
        ctx.set(dut.w_en, 1)
        for clock in range(200):
            ctx.set(dut.w_data, len(taken_in) + 1)
            ctx.set(dut.r_en, clock >= 100)
            if ctx.get(dut.w_rdy):
                taken_in.append(clock)
            if clock >= 100 and ctx.get(dut.r_rdy):
                taken_out.append(ctx.get(dut.r_data))
            await ctx.tick()
            if clock == 99:
                assert len(taken_in) == depth and ctx.get(dut.level) == depth

    simulate(dut, testbench)
    assert taken_in[:depth] == [words - 1 + words * i for i in range(depth)]
    assert taken_out == list(range(1, len(taken_out) + 1))
    assert len(taken_out) == 100 // (words + 1) or len(taken_out) == 100 // (words + 1) + 1
