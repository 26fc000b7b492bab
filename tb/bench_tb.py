"""cocotb measurement bench (not a test): throughput and latency of ``RocePipelineTop``.

Parameters: ``frames`` (pcap path), ``out`` (JSON result path), ``width``. Frames are offered back to
back with no idle cycle and the sink always ready, through tb/harness.py, which stamps every beat:
``input_beats_per_clock`` is input beats over the cycles from the first to the last input handshake,
``output_beats_per_clock`` the same at the output, ``latency_first`` the cycles from the first input beat
to the first output beat (empty pipeline), ``latency_last`` from the last input beat to the last output
beat.
"""

import json

import cocotb

from netreduce.host.pcap import read_pcap
from netreduce.sim.runner import cocotb_params
from netreduce.tb.parser_tb import play


@cocotb.test()
async def measure(dut):
    params = cocotb_params()
    frames = read_pcap(params["frames"])
    nbytes = params["width"] // 8
    bench = await play(dut, params, frames, pauses=False)
    stamps, outs = bench.players[0].stamps, bench.recorders[0].frames
    in_beats = sum(-(-len(f) // nbytes) for f in frames)
    out_beats = bench.recorders[0].consumed
    assert len(stamps) == len(frames) and len(outs) == len(frames)
    result = {
        "frames": len(frames),
        "frame_bytes": sorted({len(f) for f in frames}),
        "input_beats": in_beats,
        "output_beats": out_beats,
        "input_beats_per_clock": round(in_beats / (stamps[-1]["last"] - stamps[0]["first"] + 1), 4),
        "output_beats_per_clock": round(out_beats / (outs[-1].last - outs[0].first + 1), 4),
        "latency_first": outs[0].first - stamps[0]["first"],
        "latency_last": outs[-1].last - stamps[-1]["last"],
    }
    with open(params["out"], "w") as out:
        json.dump(result, out)
