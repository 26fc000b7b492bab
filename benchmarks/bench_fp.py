"""Benchmarks of the floating-point adders and the adder tree; prints one JSON object on stdout.

    python benchmarks/bench_fp.py [--adder-stages 2 3 4 5 6 7 8] [--tree-stages 7] [--skip-xilinx]
                                  [--skip-ecp5] [--testfloat-pairs 1000000] [--seed 1]

* ``ecp5_adder``: the binary32 adder (and bfloat16/binary16 at the tree's depth) at several pipeline
  depths on an ECP5-85 (speed grade 8, CABGA381), through ``netreduce.synth.synth_ecp5``: Fmax of the
  placed and routed harness, and LUTs, flip-flops, DSP blocks of the adder alone.
* ``ecp5_tree``: the 64-bit, 8-input binary32 tree (2 lanes, 14 adders; leaf and root register
  levels, ``--tree-stages`` per adder). A 10 Gb/s port needs
  10e9 / 64 = 156.25 M beats per second, so the tree keeps up when its Fmax is at least 156.25 MHz.
* ``xilinx_tree``: Yosys ``synth_xilinx -family xcup`` cell counts of the 512-bit 8-input binary32
  tree (16 lanes, 112 adders), no place and route.
* ``testfloat``: pairs per second through ``netreduce testfloat`` (Verilator, build excluded).

Slow (minutes, mostly nextpnr and Yosys); not a test.
"""

import argparse
import json
import sys
import time

import numpy as np


def ecp5_adders(stages_list, formats_at, seed):
    from netreduce.hw.fp import FPAdder
    from netreduce.synth import synth_ecp5

    rows = []
    for fmt, stages in [("fp32", k) for k in stages_list] + formats_at:
        r = synth_ecp5(FPAdder(fmt, stages=stages), f"fpadd_{fmt}_{stages}", seed=seed)
        rows.append({"format": fmt, "stages": stages, "fmax_mhz": r["fmax_mhz"], "luts": r["luts"],
                     "ffs": r["ffs"], "dsps": r["dsps"], "met_156_25": r["met"], "seconds": r["seconds"]})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def ecp5_tree(stages, seed):
    from netreduce.hw.fp import AdderTree
    from netreduce.synth import synth_ecp5

    tree = AdderTree("fp32", width=64, n_inputs=8, adder_stages=stages, root_stages=1)
    r = synth_ecp5(tree, "fptree64", seed=seed)
    row = {"format": "fp32", "width": 64, "n_inputs": 8, "adder_stages": stages, "latency": tree.latency,
           "fmax_mhz": r["fmax_mhz"], "luts": r["luts"], "ffs": r["ffs"], "dsps": r["dsps"],
           "brams": r["brams"], "met_156_25": r["met"],
           "gbps_at_fmax": round(64 * r["fmax_mhz"] / 1000, 2) if r["fmax_mhz"] else None,
           "placed_luts": r["placed_luts"], "placed_ffs": r["placed_ffs"], "seconds": r["seconds"]}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def xilinx_tree(stages):
    from netreduce.hw.fp import AdderTree
    from netreduce.synth import synth_xilinx_estimate

    tree = AdderTree("fp32", width=512, n_inputs=8, adder_stages=stages, root_stages=1)
    r = synth_xilinx_estimate(tree, "fptree512", family="xcup")
    row = {"format": "fp32", "width": 512, "n_inputs": 8, "adder_stages": stages, "family": "xcup",
           "latency": tree.latency, **{k: r[k] for k in ("luts", "ffs", "carry", "dsps", "brams", "srls",
                                                          "muxf", "seconds")}}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def testfloat_speed(pairs, stages):
    from netreduce.commands.testfloat import simulate_pairs
    from netreduce.sim import fp

    a, b = fp.random_pairs("fp32", pairs, seed=2)
    a_list, b_list = a.tolist(), b.tolist()
    simulate_pairs(a_list[:10], b_list[:10], fmt="fp32", stages=stages)          # build once
    start = time.monotonic()
    results = simulate_pairs(a_list, b_list, fmt="fp32", stages=stages)
    seconds = time.monotonic() - start
    ok = bool(np.array_equal(np.array(results, dtype=np.uint32), fp.add("fp32", a, b)))
    row = {"pairs": pairs, "seconds": round(seconds, 2), "pairs_per_second": int(pairs / seconds),
           "bit_exact": ok, "simulator": "verilator", "note": "simulate_pairs: file I/O and simulation, "
           "without parsing and printing the TestFloat text"}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def testfloat_cli_speed(pairs, stages):
    """The whole command, text in and text out, as a user runs it."""
    import os
    import subprocess
    import tempfile

    from netreduce.sim import fp

    a, b = fp.random_pairs("fp32", pairs, seed=3)
    r = fp.add("fp32", a, b)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.writelines(f"{x:08X} {y:08X} {z:08X} 00\n"
                     for x, y, z in zip(a.tolist(), b.tolist(), r.tolist(), strict=True))
        path = f.name
    code = ("import argparse, sys\nfrom netreduce.commands import testfloat\n"
            "p = argparse.ArgumentParser(); testfloat.register(p.add_subparsers())\n"
            "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n")
    argv = [sys.executable, "-c", code, "testfloat", "--check", "--pipeline-stages", str(stages),
            "--input", path]
    subprocess.run(argv[:-2] + ["--input", path], capture_output=True)        # build
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - start
    os.unlink(path)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    row = {"pairs": pairs, "seconds": round(seconds, 2), "pairs_per_second": int(pairs / seconds),
           "summary": last, "exit": proc.returncode}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adder-stages", type=int, nargs="*", default=[2, 3, 4, 5, 6, 7, 8])
    parser.add_argument("--tree-stages", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-ecp5", action="store_true")
    parser.add_argument("--skip-xilinx", action="store_true")
    parser.add_argument("--testfloat-pairs", type=int, default=1_000_000)
    args = parser.parse_args()

    result = {"benchmark": "bench_fp", "device": "LFE5U-85F-8BG381 (nextpnr-ecp5 --85k --speed 8)"}
    if args.testfloat_pairs:
        result["testfloat"] = testfloat_speed(args.testfloat_pairs, 4)
        result["testfloat_cli"] = testfloat_cli_speed(args.testfloat_pairs, 4)
    if not args.skip_ecp5:
        result["ecp5_adder"] = ecp5_adders(args.adder_stages,
                                           [("bf16", args.tree_stages), ("fp16", args.tree_stages)], args.seed)
        result["ecp5_tree"] = ecp5_tree(args.tree_stages, args.seed)
    if not args.skip_xilinx:
        result["xilinx_tree"] = xilinx_tree(args.tree_stages)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
