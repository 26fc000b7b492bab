"""``netreduce generate``: write the Verilog of the NetReduce switch (``netreduce.hw.switch.
NetReduceSwitch``, module ``netreduce_top``) with the build parameters given as options, and a manifest of
its ports and parameters."""

import argparse
import json
from pathlib import Path

from ..cli import UserError
from ..wire import DTYPE_CODES, MANAGEMENT_PORT, SWITCH_WIDTHS

__all__ = ["register", "run", "port_manifest", "add_switch_arguments", "switch_arguments"]

TOP_NAME = "netreduce_top"
DEFAULT_MANAGEMENT = {"switch_mac": "02:4e:52:00:00:fe", "switch_ip": "10.0.255.254"}


def register(subparsers):
    parser = subparsers.add_parser("generate", help="write the Verilog of the switch and a port manifest",
                                   description=__doc__)
    parser.add_argument("--width", type=int, choices=SWITCH_WIDTHS, default=64,
                        help="datapath width in bits (256: a core for two 64-bit ports, --port-width 64; 1024: for "
                             "512-bit ports, --port-width 512)")
    parser.add_argument("--port-width", type=int, choices=(64, 128, 256, 512), default=None,
                        help="the ports' bits, at most --width (default: --width); narrower ports go into the "
                             "core through whole-frame buffers, so that every port can run at line rate at once")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    add_switch_arguments(parser)
    parser.set_defaults(func=run)


def add_switch_arguments(parser, *, ports=True):
    """The switch's build parameters as options (``generate``, ``build``)."""
    parser.add_argument("--workers", type=int, default=8, metavar="N",
                        help="most workers of a job (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, metavar="J", help="jobs at once (default %(default)s)")
    parser.add_argument("--dtype", choices=tuple(DTYPE_CODES), default="fp32", help="element format")
    parser.add_argument("--ftz", action="store_true", help="flush subnormals to zero (saves area)")
    parser.add_argument("--mtu", type=int, default=4096, help="largest payload per packet, bytes (default %(default)s)")
    parser.add_argument("--message-packets", type=int, default=4, metavar="M",
                        help="most packets per message (default %(default)s)")
    parser.add_argument("--message-slots", type=int, default=4, metavar="K",
                        help="messages per job in the switch at once, a power of two (the credit window; default "
                             "%(default)s)")
    parser.add_argument("--max-frame", type=int, default=9216, metavar="BYTES",
                        help="longest frame that can go on (default %(default)s)")
    parser.add_argument("--adder-stages", type=int, default=7, metavar="S",
                        help="pipeline depth of each adder (default %(default)s)")
    if ports:
        parser.add_argument("--ports", type=int, default=1, metavar="P",
                            help="Ethernet ports, 1 to 4 (default %(default)s)")
    parser.add_argument("--forwarding-entries", type=int, default=16, metavar="E",
                        help="entries of the MAC forwarding table (default %(default)s)")
    parser.add_argument("--egress-queues", type=int, default=4, metavar="Q",
                        help="priority queues of each port's egress stage, 1 to 16 (default %(default)s)")
    parser.add_argument("--egress-buffer", type=int, default=16384, metavar="BYTES",
                        help="each port's egress buffer, at least --max-frame + 102 (default %(default)s)")
    parser.add_argument("--egress-weighted", action="store_true",
                        help="build each egress stage's deficit round robin (default: strict priority only)")
    parser.add_argument("--ipv6", action=argparse.BooleanOptionalAction, default=True,
                        help="parse RoCE over IPv6 (default %(default)s); without it an IPv6 frame goes on byte for "
                             "byte, as a frame that is not RoCE (aggregation is RoCE over IPv4 either way; saves "
                             "area)")
    parser.add_argument("--bounded-loss", action=argparse.BooleanOptionalAction, default=True,
                        help="build the bounded-loss class (MLT's single-packet messages with deadlines; default "
                             "%(default)s, and it needs --message-slots 2 or more); without it a job configured "
                             "bounded-loss is not enabled (saves area)")
    management = parser.add_argument_group(
        "in-band control plane", "registers written and read through management packets from one manager "
        "(docs/ARCHITECTURE.md, 'In-band control plane'); built when --manager-mac and --manager-ip are given")
    management.add_argument("--manager-mac", metavar="MAC", help="the MAC of the one host that manages the switch")
    management.add_argument("--manager-ip", metavar="IPV4", help="that host's IPv4 address")
    management.add_argument("--manager-port", type=int, default=MANAGEMENT_PORT, metavar="UDP",
                            help=f"its UDP source port (default {MANAGEMENT_PORT})")
    management.add_argument("--manager-ingress", type=int, default=None, metavar="P",
                            help="the switch port its requests must arrive on (default: any; name it wherever "
                                 "another host could forge the manager's addresses)")
    management.add_argument("--management-mac", default=DEFAULT_MANAGEMENT["switch_mac"], metavar="MAC",
                            help=f"the switch's management MAC (default {DEFAULT_MANAGEMENT['switch_mac']})")
    management.add_argument("--management-ip", default=DEFAULT_MANAGEMENT["switch_ip"], metavar="IPV4",
                            help=f"the switch's management IPv4 address (default {DEFAULT_MANAGEMENT['switch_ip']})")


def switch_arguments(args):
    """The keyword arguments of ``NetReduceSwitch`` given by ``add_switch_arguments``' options (not
    ``width`` or ``ports``)."""
    return dict(workers=args.workers, jobs=args.jobs, dtype=args.dtype, ftz=args.ftz, mtu=args.mtu,
                message_packets=args.message_packets, message_slots=args.message_slots, max_frame=args.max_frame,
                adder_stages=args.adder_stages, forwarding_entries=args.forwarding_entries,
                egress_queues=args.egress_queues, egress_buffer=args.egress_buffer,
                egress_weighted=args.egress_weighted, management=management_of(args), ipv6=args.ipv6,
                bounded_loss=args.bounded_loss)


def management_of(args):
    """The ``ManagementAddress`` the options give, or None (neither --manager-mac nor --manager-ip)."""
    from ..host.management import management_address
    if args.manager_mac is None and args.manager_ip is None:
        return None
    if args.manager_mac is None or args.manager_ip is None:
        raise UserError("the in-band control plane needs both --manager-mac and --manager-ip")
    try:
        return management_address(switch_mac=args.management_mac, switch_ip=args.management_ip,
                                  manager_mac=args.manager_mac, manager_ip=args.manager_ip,
                                  manager_port=args.manager_port, manager_ingress=args.manager_ingress)
    except ValueError as error:
        raise UserError(f"management address: {error}") from None


def port_manifest(component, name):
    """``{"module", "clock", "reset", "ports": [{"name", "direction", "width"}]}`` of a component."""
    from amaranth.hdl import Shape
    from amaranth.lib import wiring
    ports = []
    for path, member, _ in component.signature.flatten(component):
        ports.append({"name": "__".join(str(p) for p in path),
                      "direction": "input" if member.flow == wiring.In else "output",
                      "width": Shape.cast(member.shape).width})
    return {"module": name, "clock": "clk", "reset": "rst (active high, synchronous)", "ports": ports}


def run(args):
    from ..hw.switch import NetReduceSwitch
    from ..registers import manifest as register_manifest
    from ..sim.runner import generate_verilog
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {out}: {error.strerror}") from None
    try:
        top = NetReduceSwitch(width=args.width, ports=args.ports, port_width=args.port_width,
                              **switch_arguments(args))
    except ValueError as error:
        raise UserError(str(error)) from None
    verilog_path = out / f"{TOP_NAME}.v"
    generate_verilog(top, TOP_NAME, verilog_path)
    manifest = {**port_manifest(top, TOP_NAME), "width": args.width, "parameters": top.parameters,
                "verilog": verilog_path.name,
                "registers": register_manifest(top.parameters)}
    (out / f"{TOP_NAME}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {verilog_path} and {out / (TOP_NAME + '.json')}")
    return 0
