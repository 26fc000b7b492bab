"""Benchmarks of the RoCE v2 parser and deparser; prints one JSON object.

    python benchmarks/bench_parser.py [--width 64 512] [--synth] [--frames N]

- Throughput and latency of the parser followed by the deparser (``RocePipelineTop``, generated Verilog
  on Verilator): back-to-back minimum-size frames (RC SEND ONLY without payload, 58 bytes padded to 60;
  RC ACK, 62 bytes; RDMA WRITE ONLY with 4 payload bytes; a 60-byte UDP frame that is not RoCE) and
  MTU-size frames (RDMA WRITE MIDDLE with 1024 and 4096 payload bytes), no idle cycle, sink always
  ready. The goal is 1.0 beat per clock in and out.
- With ``--synth`` (the ``synth`` extra): LUTs, flip-flops, block RAMs and Fmax of the 64-bit parser with
  its ICRC, and of the 64-bit deparser, each alone on a Lattice ECP5-85, speed grade 8 (nextpnr-ecp5),
  against the 156.25 MHz XGMII clock (several minutes each).
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from netreduce.host.packets import build_ack, build_roce_frame
from netreduce.host.pcap import write_pcap
from netreduce.hw.deparser import RoceDeparser
from netreduce.hw.parser import RoceParser
from netreduce.tb.harness import run_roce_top

WORKLOADS = {
    "min_send_only_0B": lambda i: build_roce_frame(0x04, b"", psn=i),     # 58 bytes, padded to 60
    "min_ack": lambda i: build_ack(psn=i, msn=i),                          # 62 bytes
    "min_write_only_4B": lambda i: build_roce_frame(0x0A, bytes(4), reth=(0x1000, 7, 4), psn=i),
    "min_udp_not_roce": lambda i: build_roce_frame(0x04, b"", psn=i, dport=9),   # 60 bytes, UDP port 9
    "mtu_write_1024B": lambda i: build_roce_frame(0x07, bytes(range(256)) * 4, psn=i),
    "mtu_write_4096B": lambda i: build_roce_frame(0x07, bytes(range(256)) * 16, psn=i),
}


def measure(width, workload, count):
    frames = [WORKLOADS[workload](i) for i in range(count)]
    with tempfile.TemporaryDirectory() as scratch:
        pcap, out = Path(scratch) / "frames.pcap", Path(scratch) / "result.json"
        write_pcap(pcap, frames)
        run_roce_top("pipeline", width, test_module="netreduce.tb.bench_tb", quiet=True,
                     params={"frames": str(pcap), "out": str(out)})
        return json.loads(out.read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, nargs="+", default=[64, 512], choices=(64, 512))
    parser.add_argument("--frames", type=int, default=200, help="frames per workload")
    parser.add_argument("--synth", action="store_true", help="also synthesize for the ECP5-85")
    args = parser.parse_args(argv)
    report = {"throughput": {}}
    for width in args.width:
        for workload in WORKLOADS:
            count = args.frames if "4096" not in workload else max(10, args.frames // 10)
            report["throughput"][f"{width}b/{workload}"] = measure(width, workload, count)
            print(f"{width}b {workload}: done", file=sys.stderr)
    if args.synth:
        from netreduce.synth import synth_ecp5
        for key, component, name in (("ecp5_parser_64b", RoceParser(64), "roce_parser_64"),
                                     ("ecp5_deparser_64b", RoceDeparser(64), "roce_deparser_64")):
            start = time.time()
            report[key] = synth_ecp5(component, name, freq_mhz=156.25)
            report[key].pop("work_dir", None)
            print(f"synthesis of {name}: {time.time() - start:.0f} s", file=sys.stderr)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
