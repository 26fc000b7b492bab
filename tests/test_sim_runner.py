"""``run_cocotb``: the waveform option (a build with tracing in a folder of its own, and the waveform moved
to the path asked for, what ``netreduce simulate --engine rtl --waves FILE`` relies on), and generated
Verilog shared across build folders by the digest of its source."""

import pytest
from amaranth.hdl import Elaboratable, Module, Shape, Signal, signed
from amaranth.lib.memory import Memory

from netreduce.sim.runner import available_simulators, run_cocotb
from netreduce.tb.fp_tb import AxisAdder

VERILATOR_RUN = [pytest.mark.skipif("verilator" not in available_simulators(), reason="Verilator is not installed"),
                 pytest.mark.slow(minutes=1)]


def _marked(test):
    for mark in VERILATOR_RUN:
        test = mark(test)
    return test


@_marked
def test_waves_to_a_path(tmp_path):
    waves = tmp_path / "adder.vcd"
    build = {"top": "adder", "fmt": "fp16", "stages": 3}
    run_cocotb(AxisAdder("fp16", stages=3), name="fp_adder", test_module="netreduce.tb.fp_tb",
               build_params=build, params={"spanning": 2, "random": 10}, simulator="verilator", waves=waves,
               build_root=tmp_path / "build", quiet=True)
    text = waves.read_text()
    assert text.lstrip().startswith("$") and "$var" in text and "$enddefinitions" in text     # a VCD
    (folder,) = (tmp_path / "build" / "fp_adder" / "verilator").iterdir()
    assert folder.name.endswith("-waves") and not (folder / "dump.vcd").exists()


@_marked
def test_generated_verilog_is_shared_across_build_folders(tmp_path, monkeypatch):
    """A second checkout (another build folder) takes the Verilog from the shared cache, without Yosys;
    a change of the build parameters does not."""
    from netreduce.sim import runner
    monkeypatch.setenv("NETREDUCE_CACHE", str(tmp_path / "cache"))
    build = {"top": "adder", "fmt": "fp16", "stages": 3}
    first = tmp_path / "one"
    first.mkdir()
    text = runner._cached_verilog(AxisAdder("fp16", stages=3), "fp_adder", first, build)
    assert "module fp_adder" in text and len(list((tmp_path / "cache" / "verilog").iterdir())) == 1

    def no_yosys(*args, **kwargs):
        raise AssertionError("generated again")
    monkeypatch.setattr(runner, "generate_verilog", no_yosys)
    second = tmp_path / "two"
    second.mkdir()
    assert runner._cached_verilog(AxisAdder("fp16", stages=3), "fp_adder", second, build) == text
    with pytest.raises(AssertionError, match="generated again"):
        runner._cached_verilog(AxisAdder("fp16", stages=4), "fp_adder", second, {**build, "stages": 4})


@_marked
def test_shared_verilog_cache_keeps_the_most_recently_used(tmp_path, monkeypatch):
    import os

    from netreduce.sim import runner
    monkeypatch.setattr(runner, "VERILOG_CACHE_FILES", 3)
    for i in range(5):
        path = tmp_path / f"{i}.v"
        path.write_text("module m; endmodule")
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(tmp_path / "0.v", (2000, 2000))        # used again lately
    runner._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.v", "3.v", "4.v"]


@_marked
def test_a_design_depends_on_the_modules_it_imports_only():
    """The Verilog cache's key (``design_modules``): the modules behind a design's classes and their imports
    from the project, so that a change to one design regenerates only the designs that use it."""
    from netreduce.hw.parser import RoceParser
    from netreduce.hw.switch import NetReduceSwitch
    from netreduce.sim.runner import design_modules
    from netreduce.tb.harness import Harness
    switch = NetReduceSwitch(workers=2, jobs=1)
    switch._MustUse__silence = True
    held = design_modules(Harness(switch, inputs=["s_axis"], outputs=["m_axis"]))
    assert {"netreduce.tb.harness", "netreduce.hw.switch.top", "netreduce.hw.switch.management",
            "netreduce.hw.parser", "netreduce.hw.fp.tree", "netreduce.wire", "netreduce.registers"} <= set(held)
    parser = RoceParser(64)
    parser._MustUse__silence = True
    alone = design_modules(parser)
    assert "netreduce.hw.parser" in alone and "netreduce.hw.switch.top" not in alone
    assert not any(name.startswith("netreduce.sim.switch_model") for name in held + alone)


class _Memories(Elaboratable):
    """Memories of every kind of initial contents: none, zeros, words of every width, signed words."""

    def elaborate(self, platform):
        m = Module()
        contents = [(8, 16, []), (8, 4, [0, 0]), (37, 5, [1, 2**37 - 1, 0x5A5A5A5A5, 0, 7]),
                    (signed(12), 6, [-1, -2048, 2047, 0, 5, -7]), (1, 3, [1, 0, 1]), (130, 2, [3 << 120, 1])]
        for index, (shape, depth, init) in enumerate(contents):
            m.submodules[f"memory{index}"] = memory = Memory(shape=shape, depth=depth, init=init)
            read = memory.read_port(domain="comb")
            m.d.comb += Signal(Shape.cast(shape), name=f"out{index}").eq(read.data)
        return m


def test_quick_memory_init_writes_the_same_rtlil():
    """``quick_memory_init`` changes the time Amaranth takes, not the text it writes."""
    from amaranth.back import rtlil

    from netreduce.sim.runner import quick_memory_init
    slow = rtlil.convert(_Memories(), name="memories", ports={}, emit_src=False)
    with quick_memory_init():
        quick = rtlil.convert(_Memories(), name="memories", ports={}, emit_src=False)
    assert "$meminit_v2" in slow and quick == slow
    assert rtlil.convert(_Memories(), name="memories", ports={}, emit_src=False) == slow     # restored
