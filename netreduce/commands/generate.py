"""``netreduce generate``: write the Verilog of the top module built so far (the RoCE v2 parser followed
by the deparser, ``netreduce.hw.top.RocePipelineTop``) and a manifest of its ports."""

import json
from pathlib import Path

from ..cli import UserError

__all__ = ["register", "run", "port_manifest"]

TOP_NAME = "netreduce_top"


def register(subparsers):
    parser = subparsers.add_parser("generate", help="write the Verilog of the switch and a port manifest",
                                   description=__doc__)
    parser.add_argument("--width", type=int, choices=(64, 512), default=64, help="datapath width in bits")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    parser.set_defaults(func=run)


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
    from ..hw.top import RocePipelineTop
    from ..sim.runner import generate_verilog
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {out}: {error.strerror}") from None
    top = RocePipelineTop(args.width)
    verilog_path = out / f"{TOP_NAME}.v"
    generate_verilog(top, TOP_NAME, verilog_path)
    manifest = {**port_manifest(top, TOP_NAME), "width": args.width,
                "parameters": {"width": args.width}, "verilog": verilog_path.name}
    (out / f"{TOP_NAME}.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {verilog_path} and {out / (TOP_NAME + '.json')}")
    return 0
