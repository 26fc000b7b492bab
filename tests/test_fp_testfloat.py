"""`netreduce testfloat`: TestFloat-format lines through the RTL adder (Verilator)."""

import argparse

import numpy as np
import pytest

from netreduce.cli import UserError
from netreduce.commands import testfloat
from netreduce.hw.fp import MAX_ADDER_STAGES
from netreduce.sim import fp
from netreduce.sim.runner import available_simulators


def run_cli(argv, capsys):
    parser = argparse.ArgumentParser()
    testfloat.register(parser.add_subparsers())
    args = parser.parse_args(["testfloat", *argv])
    status = args.func(args)
    return status, capsys.readouterr()


def test_parse_lines():
    a, b, e = testfloat.parse_lines(["3F800000 3F800000 40000000 00\n", "\n", "# comment\n",
                                     "0001 8001\n"], 32)
    assert a == [0x3F800000, 1] and b == [0x3F800000, 0x8001] and e == [0x40000000, None]
    with pytest.raises(UserError, match="line 1: not hexadecimal"):
        testfloat.parse_lines(["3F80000G 0"], 32)
    with pytest.raises(UserError, match="line 2: expected 'A B"):
        testfloat.parse_lines(["0 0", "0"], 32)
    with pytest.raises(UserError, match="wider than 16 bits"):
        testfloat.parse_lines(["10000 0"], 16)
    with pytest.raises(UserError, match="--check needs an expected result"):
        testfloat.parse_lines(["0 0"], 16, need_expected=True)


needs_verilator = pytest.mark.skipif("verilator" not in available_simulators(),
                                     reason="Verilator is not installed")


@needs_verilator
@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("fmt, ftz, stages", [("fp16", False, 4), ("bf16", True, 2)])
def test_all_spanning_pairs(fmt, ftz, stages, tmp_path, capsys):
    """Every ordered pair of 300 exponent-spanning operands, checked against the golden model."""
    f = fp.get_format(fmt)
    ops = fp.spanning_operands(f, 300, seed=4)
    a, b = np.repeat(ops, len(ops)), np.tile(ops, len(ops))
    ref = fp.add(f, a, b, ftz)
    d = f.width // 4
    path = tmp_path / "vectors.txt"
    path.write_text("".join(f"{x:0{d}x} {y:0{d}x} {z:0{d}x} 01\n" for x, y, z in
                            zip(a.tolist(), b.tolist(), ref.tolist(), strict=True)))
    argv = ["--format", fmt, "--pipeline-stages", str(stages), "--check", "--input", str(path)]
    if ftz:
        argv.append("--ftz")
    status, out = run_cli(argv, capsys)
    lines = out.out.splitlines()
    assert lines[-1] == f"{len(a)} passed, 0 failed"
    assert status == 0
    assert lines[0] == f"{int(a[0]):0{d}X} {int(b[0]):0{d}X} {int(ref[0]):0{d}X}"
    assert len(lines) == len(a) + 1


@needs_verilator
@pytest.mark.slow(minutes=1)
def test_mismatch_and_nan_equality(tmp_path, capsys):
    """Any NaN matches any NaN; a wrong expectation is counted and the status is 1. No clock: K=0."""
    lines = [
        "7F800000 FF800000 7FC00001 10",     # inf - inf: canonical NaN, matches another NaN
        "3F800000 3F800000 40000000 00",
        "3F800000 3F800000 40000001 00",     # wrong on purpose
        "00000001 80000001 00000000 00",
    ]
    path = tmp_path / "v.txt"
    path.write_text("\n".join(lines) + "\n")
    status, out = run_cli(["--pipeline-stages", "0", "--check", "--input", str(path)], capsys)
    assert out.out.splitlines() == ["7F800000 FF800000 7FC00000", "3F800000 3F800000 40000000",
                                    "3F800000 3F800000 40000000", "00000001 80000001 00000000",
                                    "3 passed, 1 failed"]
    assert status == 1
    assert "mismatch: 3F800000 + 3F800000" in out.err


@needs_verilator
@pytest.mark.slow(minutes=1)
def test_without_check_prints_results_only(tmp_path, capsys):
    path = tmp_path / "v.txt"
    path.write_text("3f800000 bf800000\n7f7fffff 7f7fffff\n")
    status, out = run_cli(["--input", str(path)], capsys)
    assert status == 0
    assert out.out.splitlines() == ["3F800000 BF800000 00000000", "7F7FFFFF 7F7FFFFF 7F800000"]


def test_bad_stage_count(tmp_path, capsys):
    path = tmp_path / "v.txt"
    path.write_text("0 0\n")
    with pytest.raises(UserError, match=f"pipeline stages must be between 0 and {MAX_ADDER_STAGES}"):
        run_cli(["--pipeline-stages", str(MAX_ADDER_STAGES + 1), "--input", str(path)], capsys)


@pytest.mark.skipif("icarus" not in available_simulators(), reason="Icarus Verilog is not installed")
@pytest.mark.slow(minutes=1)
def test_icarus(tmp_path, capsys):
    a, b = fp.random_pairs("fp16", 2000, seed=9)
    ref = fp.add("fp16", a, b, True)
    path = tmp_path / "v.txt"
    path.write_text("".join(f"{x:04X} {y:04X} {z:04X}\n" for x, y, z in
                            zip(a.tolist(), b.tolist(), ref.tolist(), strict=True)))
    status, out = run_cli(["--format", "fp16", "--ftz", "--sim", "icarus", "--pipeline-stages", "3", "--check",
                           "--input", str(path)], capsys)
    assert out.out.splitlines()[-1] == "2000 passed, 0 failed"
    assert status == 0
