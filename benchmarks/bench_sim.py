"""Speed of the RTL simulations that the tests run; prints one JSON object.

    python benchmarks/bench_sim.py [--width 64 512] [--mode bulk clock] [--cold]

For each width, the workloads of two tests, on the builds the tests use:

- ``switch``: tests/test_tb_switch.py's replay of an all-reduce recorded on the golden model (64 bits: 8
  workers, 12,000 bytes each, MTU 1024, as ``test_eight_workers_64``; 512 bits: 4 workers, 40,000 bytes,
  MTU 4096, as ``test_mtu_4096_512``), backpressure 0.3, every frame checked against the model's;
- ``parser``: tests/test_tb_parser.py's captures of real NICs through ``RocePipelineTop`` (as
  ``test_captures``), idle 0.2 and backpressure 0.3.

``bulk`` runs them as the tests do, through the player and recorder of tb/harness.py; ``clock`` drives the
same build clock by clock with cocotbext-axi's source and sink. Each figure: simulated clocks per second
of wall time and frames (in and out) per second, over the replay alone. ``build_seconds`` is the time of
the run outside the replay (generating Verilog, Verilator and g++ where the build is not cached,
starting the simulator); with ``--cold`` each build is first made in an empty folder (``cold``) and then
run again (``cached``).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def switch_run(width, mode, scratch, build_root):
    from netreduce.tb import scenarios
    if width == 64:
        scenario = scenarios.record(workers=8, nbytes=12000, mtu=1024, seed=2)
        build = "fp32x64"
    else:
        scenario = scenarios.record(workers=4, nbytes=40000, mtu=4096, seed=5, width=512)
        build = "fp32x512"
    out = scratch / "result.json"
    start = time.perf_counter()
    scenarios.replay(scratch, scenario, build, testcase="simulation_speed", mode=mode, backpressure=0.3,
                     seed=2, out=str(out), build_root=build_root, quiet=True)
    return json.loads(out.read_text()), time.perf_counter() - start


def parser_run(width, mode, scratch, build_root):
    from netreduce.host.pcap import read_pcap, write_pcap
    from netreduce.tb.harness import run_roce_top
    frames = [f for path in sorted((REPO / "tests" / "data" / "captures").rglob("*.pcap"))
              for f in read_pcap(path) if f]
    pcap, out = scratch / "frames.pcap", scratch / "result.json"
    write_pcap(pcap, frames)
    start = time.perf_counter()
    run_roce_top("pipeline", width, testcase="simulation_speed", quiet=True, build_root=build_root,
                 params={"frames": str(pcap), "out": str(out), "mode": mode, "idle": 0.2, "backpressure": 0.3,
                         "seed": width})
    return json.loads(out.read_text()), time.perf_counter() - start


def figures(result, total):
    return {"clocks": result["clocks"], "frames": result["frames"], "wall_seconds": round(result["wall_seconds"], 2),
            "clocks_per_second": round(result["clocks"] / result["wall_seconds"]),
            "frames_per_second": round(result["frames"] / result["wall_seconds"]),
            "build_seconds": round(total - result["wall_seconds"], 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, nargs="+", default=[64, 512], choices=(64, 512))
    parser.add_argument("--mode", nargs="+", default=["bulk", "clock"], choices=("bulk", "clock"))
    parser.add_argument("--bench", nargs="+", default=["parser", "switch"], choices=("parser", "switch"))
    parser.add_argument("--cold", action="store_true", help="first build in an empty folder, then run cached")
    args = parser.parse_args(argv)
    from netreduce.sim.runner import verilator_cxx_opt
    report = {"verilator_cxx_opt": verilator_cxx_opt()}
    runs = {"parser": parser_run, "switch": switch_run}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        cold_root = scratch / "sim_build" if args.cold else None
        for bench in args.bench:
            for width in args.width:
                entry = report.setdefault(bench, {}).setdefault(f"{width}b", {})
                for mode in args.mode:
                    if args.cold and "cold" not in entry:
                        entry["cold"] = figures(*runs[bench](width, mode, scratch, cold_root))
                    entry[mode] = figures(*runs[bench](width, mode, scratch, cold_root))
                    print(f"{bench} {width}b {mode}: {entry[mode]['clocks_per_second']} clocks/s", file=sys.stderr)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
