"""``netreduce parse-pcap FILE``: run every frame of a pcap through the RTL parser (or the golden model)
and print one JSON object per frame, one per line, in frame order (keys: ``netreduce.sim.roce_model.
frame_summary``)."""

import json
import sys
import tempfile
from pathlib import Path

from ..cli import UserError

__all__ = ["register", "run", "rtl_records"]


def register(subparsers):
    parser = subparsers.add_parser(
        "parse-pcap", help="parse every frame of a pcap file and print one JSON object per frame",
        description=__doc__)
    parser.add_argument("file", metavar="FILE", help="pcap or pcapng file of Ethernet frames")
    parser.add_argument("--width", type=int, choices=(64, 512), default=64, help="datapath width in bits")
    parser.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                        help="simulator for the RTL (default: verilator)")
    parser.add_argument("--model", action="store_true", help="use the golden model instead of the RTL")
    parser.set_defaults(func=run)


def _read(path):
    from ..host.pcap import read_pcap
    if not Path(path).is_file():
        raise UserError(f"no such file: {path}")
    try:
        return read_pcap(path)
    except Exception as error:      # scapy raises several types for a file that is not a capture
        raise UserError(f"cannot read {path} as a pcap file: {error}") from None


def rtl_records(frames, width, simulator):
    """``(header dict, verdict dict)`` of each frame from the generated Verilog of the parser."""
    from ..host.pcap import write_pcap
    from ..hw.stream import ParsedHeader
    from ..sim.runner import SimulationError
    from ..tb.harness import run_roce_top
    from ..wire import PARSED_HEADER_FIELDS, PAYLOAD_VERDICT_FIELDS

    with tempfile.TemporaryDirectory(prefix="netreduce-parse-") as scratch:
        pcap, out = Path(scratch) / "in.pcap", Path(scratch) / "records.jsonl"
        write_pcap(pcap, frames)
        try:
            run_roce_top("parser", width, simulator=simulator,
                       testcase="dump_records", params={"frames": str(pcap), "out": str(out)}, quiet=True)
        except SimulationError as error:
            raise UserError(str(error)) from None
        lines = out.read_text().splitlines()
    records = []
    for line in lines:
        item = json.loads(line)
        header = ParsedHeader.from_bits(int(item["header"]))
        records.append(({name: int(getattr(header, name)) for name, _ in PARSED_HEADER_FIELDS},
                         {name: item["verdict"] >> bit & 1
                          for bit, (name, _) in enumerate(PAYLOAD_VERDICT_FIELDS)}))
    return records


def run(args):
    from ..sim.roce_model import frame_summary, parse_frame
    frames = _read(args.file)
    if not frames:
        return 0
    if args.model:
        records = [(p.header, p.verdict) for p in map(parse_frame, frames)]
    else:
        from ..sim.runner import SimulationError, simulator_env
        try:
            simulator_env(args.sim)
        except SimulationError as error:
            raise UserError(str(error)) from None
        records = rtl_records(frames, args.width, args.sim)
    out = sys.stdout
    for index, (header, verdict) in enumerate(records):
        out.write(json.dumps(frame_summary(index, header, verdict)) + "\n")
    return 0
