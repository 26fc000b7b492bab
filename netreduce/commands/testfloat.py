"""``netreduce testfloat``: push operand pairs in Berkeley TestFloat's line format through the RTL adder.

Input (standard input, or ``--input FILE``): one case a line, ``A B [RESULT [FLAGS]]`` in hex, as
TestFloat's ``testfloat_gen f32_add`` (or ``f16_add``) writes them; blank lines and lines starting with
``#`` are skipped. Every pair goes through the generated Verilog of ``netreduce.hw.fp.FPAdder`` at one
pair per clock, and the command prints ``A B RESULT`` a line, in the input order, in upper-case hex of
the format's width. The third and fourth columns are ignored unless ``--check`` is given: then RESULT
is compared with the third column (any NaN equals any NaN; the flags are not compared, the RTL has none)
and the last line is ``N passed, M failed``; the exit status is 1 when M > 0.

The simulation is a small Verilog testbench that reads the pairs from a file with ``$fscanf`` and writes
the results with ``$fwrite`` (no Python in the per-clock loop), built once per (format, FTZ, stages,
simulator) under the simulation build folder and reused while the generated Verilog is unchanged.
"""

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ..cli import UserError

__all__ = ["register", "run", "parse_lines", "simulate_pairs", "format_hex"]

FORMAT_CHOICES = ("fp32", "bf16", "fp16")
_TOP = "fpadd"

_TESTBENCH = """\
`timescale 1ns/1ps
module testfloat_tb;
  reg clk = 1'b0;
  reg [{msb}:0] a = 0;
  reg [{msb}:0] b = 0;
  reg [{msb}:0] va, vb;
  reg valid = 1'b0;
  wire [{msb}:0] result;
  wire o_valid;
  integer fin, fout, total, sent, got, r;
  {top} dut ({clock_ports}.i__valid(valid), .i__payload({{b, a}}), .o__valid(o_valid), .o__ready(1'b1),
              .o__payload(result));
  always #5 clk = ~clk;
  initial begin
    sent = 0;
    got = 0;
    if (!$value$plusargs("N=%d", total)) total = 0;
    fin = $fopen("vectors.hex", "r");
    fout = $fopen("results.hex", "w");
    if (fin == 0 || fout == 0) begin
      $display("testfloat_tb: cannot open vectors.hex or results.hex");
      $finish;
    end
    if (total == 0) $finish;
  end
  always @(posedge clk) begin
    if (o_valid) begin
      $fwrite(fout, "%h\\n", result);
      got = got + 1;
      if (got == total) begin
        $fclose(fout);
        $finish;
      end
    end
    if (sent < total) begin
      r = $fscanf(fin, "%h %h\\n", va, vb);
      a <= va;
      b <= vb;
      valid <= 1'b1;
      sent = sent + 1;
    end else begin
      valid <= 1'b0;
    end
  end
endmodule
"""


def register(subparsers):
    parser = subparsers.add_parser(
        "testfloat", help="run TestFloat-format operand pairs through the RTL floating-point adder",
        description="Read 'A B [RESULT [FLAGS]]' hex lines (Berkeley TestFloat's format), push every pair "
                    "through the RTL adder at one pair per clock and print 'A B RESULT' lines in the "
                    "same order.")
    parser.add_argument("--format", choices=FORMAT_CHOICES, default="fp32",
                        help="operand format (default fp32)")
    parser.add_argument("--ftz", action="store_true", help="build the adder with flush-to-zero")
    parser.add_argument("--pipeline-stages", type=int, default=4, metavar="K",
                        help="register levels of the adder (default 4)")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default=None,
                        help="simulator (default: $SIM or verilator)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the third column and end with 'N passed, M failed'")
    parser.add_argument("--input", metavar="FILE", help="read FILE instead of standard input")
    parser.add_argument("--build-dir", metavar="DIR", help="simulation build folder (default: sim_build)")
    parser.set_defaults(func=run)


def format_hex(value, digits):
    return f"{value:0{digits}X}"


def parse_lines(lines, width, need_expected=False):
    """``(a, b, expected)`` lists from TestFloat lines; ``expected`` entries are None when absent."""
    a_list, b_list, e_list = [], [], []
    limit = 1 << width
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        tokens = text.split()
        if len(tokens) < 2:
            raise UserError(f"line {number}: expected 'A B [RESULT [FLAGS]]' in hex, got {text[:60]!r}")
        try:
            values = [int(t, 16) for t in tokens[:3]]
        except ValueError:
            raise UserError(f"line {number}: not hexadecimal: {text[:60]!r}") from None
        if any(v < 0 or v >= limit for v in values):
            raise UserError(f"line {number}: operand wider than {width} bits: {text[:60]!r}")
        if need_expected and len(values) < 3:
            raise UserError(f"line {number}: --check needs an expected result in the third column")
        a_list.append(values[0])
        b_list.append(values[1])
        e_list.append(values[2] if len(values) > 2 else None)
    return a_list, b_list, e_list


def _build_root(build_dir):
    from ..sim.runner import DEFAULT_BUILD_ROOT
    root = Path(build_dir) if build_dir else DEFAULT_BUILD_ROOT
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError:
        root = Path(tempfile.gettempdir()) / "netreduce_sim_build"
        root.mkdir(parents=True, exist_ok=True)
    return root


def _build(fmt, ftz, stages, simulator, build_dir):
    """Build (or reuse) the testbench executable; returns (argv prefix, env additions)."""
    from amaranth.back import verilog

    from ..hw.fp import FPAdder
    from ..sim.runner import SimulationError, simulator_env

    try:
        dut = FPAdder(fmt, stages=stages, ftz=ftz, backpressure=False)
    except (TypeError, ValueError) as error:
        raise UserError(str(error)) from None
    try:
        env_add = simulator_env(simulator)
    except SimulationError as error:
        raise UserError(str(error)) from None
    text = verilog.convert(dut, name=_TOP, emit_src=False)
    clocked = re.search(r"^\s*input\s+(wire\s+)?clk\b", text, re.M) is not None
    clock_ports = ".clk(clk), .rst(1'b0), " if clocked else ""
    tb = _TESTBENCH.format(msb=dut.fmt.width - 1, top=_TOP, clock_ports=clock_ports)
    digest = hashlib.sha256((text + tb).encode()).hexdigest()[:16]
    folder = _build_root(build_dir) / "testfloat" / simulator / f"{fmt}-ftz{int(ftz)}-k{stages}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **env_add}
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "built"
        if simulator == "verilator":
            exe = folder / "obj" / "Vtestfloat_tb"
            argv = [str(exe)]
        else:
            exe = folder / "tb.vvp"
            argv = ["vvp", "-n", str(exe)]
        if not (done.exists() and exe.exists()):
            (folder / f"{_TOP}.v").write_text(text)
            (folder / "tb.v").write_text(tb)
            if simulator == "verilator":
                cmd = ["verilator", "--binary", "-j", "2", "--top-module", "testfloat_tb", "-Wno-fatal",
                       "-Wno-lint", "-Wno-style", "--x-assign", "fast", "--x-initial", "fast", "-O3",
                       "-CFLAGS", "-fcoroutines -O1", "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include",
                       "--Mdir", "obj", "-o", "Vtestfloat_tb", "tb.v", f"{_TOP}.v"]
            else:
                cmd = ["iverilog", "-g2012", "-s", "testfloat_tb", "-o", "tb.vvp", "tb.v", f"{_TOP}.v"]
            proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                (folder / "build.log").write_text(proc.stdout + proc.stderr)
                raise UserError(f"{simulator} build failed; see {folder / 'build.log'}")
            done.write_text("ok\n")
    return argv, env


def simulate_pairs(a_list, b_list, *, fmt="fp32", ftz=False, stages=4, simulator=None, build_dir=None):
    """Results (ints) of the RTL adder for the pairs, in order."""
    from ..sim.fp import get_format
    from ..sim.runner import default_simulator

    simulator = simulator or default_simulator()
    if simulator not in ("verilator", "icarus"):
        raise UserError(f"unknown simulator {simulator!r}; choose verilator or icarus")
    width = get_format(fmt).width
    digits = width // 4
    argv, env = _build(fmt, ftz, stages, simulator, build_dir)
    if not a_list:
        return []
    with tempfile.TemporaryDirectory(prefix="netreduce_testfloat_") as tmp:
        tmp = Path(tmp)
        with open(tmp / "vectors.hex", "w") as out:
            out.writelines(f"{a:0{digits}x} {b:0{digits}x}\n" for a, b in zip(a_list, b_list, strict=True))
        proc = subprocess.run([*argv, f"+N={len(a_list)}"], cwd=tmp, env=env, capture_output=True,
                              text=True)
        results_path = tmp / "results.hex"
        if proc.returncode != 0 or not results_path.exists():
            raise UserError(f"{simulator} simulation failed (exit {proc.returncode}): "
                            f"{(proc.stdout + proc.stderr).strip()[-400:]}")
        with open(results_path) as f:
            results = [int(line, 16) for line in f if line.strip()]
    if len(results) != len(a_list):
        raise UserError(f"the simulation returned {len(results)} results for {len(a_list)} pairs")
    return results


def _is_nan(fmt, value):
    return (value & fmt.abs_mask) > fmt.inf


def run(args):
    from ..sim.fp import get_format

    fmt = get_format(args.format)
    if args.input:
        try:
            with open(args.input) as f:
                lines = f.readlines()
        except OSError as error:
            raise UserError(f"cannot read {args.input}: {error.strerror}") from None
    else:
        lines = sys.stdin.readlines()
    a_list, b_list, e_list = parse_lines(lines, fmt.width, need_expected=args.check)
    results = simulate_pairs(a_list, b_list, fmt=fmt.name, ftz=args.ftz, stages=args.pipeline_stages,
                             simulator=args.sim, build_dir=args.build_dir)
    digits = fmt.width // 4
    out = sys.stdout
    chunk = []
    passed = failed = 0
    shown = 0
    for a, b, r, e in zip(a_list, b_list, results, e_list, strict=True):
        chunk.append(f"{a:0{digits}X} {b:0{digits}X} {r:0{digits}X}\n")
        if args.check:
            if r == e or (_is_nan(fmt, r) and _is_nan(fmt, e)):
                passed += 1
            else:
                failed += 1
                if shown < 10:
                    print(f"mismatch: {a:0{digits}X} + {b:0{digits}X}: RTL {r:0{digits}X}, "
                          f"expected {e:0{digits}X}", file=sys.stderr)
                    shown += 1
        if len(chunk) >= 65536:
            out.write("".join(chunk))
            chunk.clear()
    out.write("".join(chunk))
    if args.check:
        out.write(f"{passed} passed, {failed} failed\n")
    out.flush()
    return 1 if failed else 0
