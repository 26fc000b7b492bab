"""``run_cocotb``'s waveform option: a build with tracing in a folder of its own, and the waveform moved
to the path asked for (what ``netreduce simulate --engine rtl --waves FILE`` relies on)."""

import pytest

from netreduce.sim.runner import available_simulators, run_cocotb
from netreduce.tb.fp_tb import AxisAdder

pytestmark = [pytest.mark.skipif("verilator" not in available_simulators(), reason="Verilator is not installed"),
              pytest.mark.slow(minutes=1)]


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
