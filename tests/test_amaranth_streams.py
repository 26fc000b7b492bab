"""netreduce.sim.amaranth_streams.shared_simulator: a simulator handed out again is as good as a new one."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from netreduce.sim import amaranth_streams
from netreduce.sim.amaranth_streams import shared_simulator


class Counter(wiring.Component):
    """A free-running counter from 5, and a 4-word memory (initially 7, 8, 9, 10) written at ``addr``."""

    addr: In(2)
    data: In(8)
    we: In(1)
    count: Out(8)
    word: Out(8)

    def elaborate(self, platform):
        m = Module()
        count = Signal(8, init=5)
        m.d.sync += count.eq(count + 1)
        m.d.comb += self.count.eq(count)
        m.submodules.mem = mem = Memory(shape=8, depth=4, init=[7, 8, 9, 10])
        write, read = mem.write_port(), mem.read_port(domain="comb")
        m.d.comb += [write.addr.eq(self.addr), write.data.eq(self.data), write.en.eq(self.we),
                     read.addr.eq(self.addr), self.word.eq(read.data)]
        return m


def test_a_shared_simulator_starts_like_a_new_one():
    key = ("test_amaranth_streams", "counter")
    builds, seen, background_runs = [], [], []

    def build():
        builds.append(1)
        return Counter()

    dut, sim = shared_simulator(key, build)

    async def first(ctx):
        ctx.set(dut.addr, 2)
        ctx.set(dut.data, 99)
        ctx.set(dut.we, 1)
        await ctx.tick().repeat(3)
        ctx.set(dut.we, 0)
        seen.append(("first", ctx.get(dut.count), ctx.get(dut.word)))

    async def lingering(ctx):                       # still waiting on a clock when the run ends
        while True:
            await ctx.tick()
            background_runs.append(ctx.get(dut.count))

    sim.add_testbench(first)
    sim.add_testbench(lingering, background=True)
    sim.run()
    assert seen == [("first", 8, 99)]
    runs_in_first = len(background_runs)
    assert runs_in_first > 0

    again, sim_again = shared_simulator(key, build)
    assert (again, sim_again) == (dut, sim) and builds == [1]     # not built or compiled again

    async def second(ctx):
        seen.append(("second", ctx.get(dut.count), ctx.get(dut.word), ctx.get(dut.addr), ctx.get(dut.we)))
        await ctx.tick().repeat(2)
        ctx.set(dut.addr, 3)
        seen.append(("second", ctx.get(dut.count), ctx.get(dut.word)))

    sim.add_testbench(second)
    sim.run()
    # everything back at its initial value: the register, the memory word written before, the inputs
    assert seen[1:] == [("second", 5, 7, 0, 0), ("second", 7, 10)]
    assert len(background_runs) == runs_in_first, "a testbench of the earlier run ran again"


def test_the_cache_is_bounded_and_keyed():
    made = []

    def build():
        made.append(Counter())
        return made[-1]

    first, _ = shared_simulator(("bounded", 0), build)
    for k in range(1, amaranth_streams.SHARED_SIMULATORS + 1):
        other, _ = shared_simulator(("bounded", k), build)
        assert other is not first
    assert len(amaranth_streams._SHARED) <= amaranth_streams.SHARED_SIMULATORS
    again, _ = shared_simulator(("bounded", 0), build)      # the oldest was let go: built again
    assert again is not first and len(made) == amaranth_streams.SHARED_SIMULATORS + 2
