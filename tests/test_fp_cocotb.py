"""Launch the cocotb testbench tb/fp_tb.py on Verilator (or $SIM) for the adder and the tree."""

import pytest

from netreduce.sim.runner import available_simulators, default_simulator, run_cocotb
from netreduce.tb.fp_tb import AxisAdder, AxisTree

pytestmark = [pytest.mark.skipif(default_simulator() not in available_simulators(),
                                 reason=f"simulator {default_simulator()} is not installed"),
              pytest.mark.slow(minutes=2)]


@pytest.mark.parametrize("fmt, stages, spanning, random", [
    ("fp32", 6, 256, 20000),
    ("bf16", 4, 300, 2000),
    ("fp16", 3, 300, 2000),
])
def test_adder_cocotb(fmt, stages, spanning, random):
    """Corner cases, biased random pairs with stalls, and every ordered pair of ``spanning`` operands
    at one pair per clock; the top holds a subnormal and an FTZ adder side by side."""
    build = {"top": "adder", "fmt": fmt, "stages": stages}
    run_cocotb(AxisAdder(fmt, stages=stages), name="fp_adder", test_module="netreduce.tb.fp_tb",
               build_params=build, params={"spanning": spanning, "random": random})


@pytest.mark.parametrize("fmt, ftz, n_inputs, width", [
    ("fp16", False, 3, 32),
])
def test_tree_cocotb(fmt, ftz, n_inputs, width):
    build = {"top": "tree", "fmt": fmt, "ftz": ftz, "stages": 3, "n_inputs": n_inputs, "width": width}
    run_cocotb(AxisTree(fmt, width=width, n_inputs=n_inputs, stages=3, ftz=ftz), name="fp_tree",
               test_module="netreduce.tb.fp_tb", build_params=build, params={"beats": 300})
