"""cocotb measurement bench (not a test): throughput and latency of ``RocePipelineTop``.

Parameters: ``frames`` (pcap path), ``out`` (JSON result path), ``width``. Frames are offered back to
back with no idle cycle and the sink always ready; every clock edge is observed:
``input_beats_per_clock`` is input beats over the cycles from the first to the last input handshake,
``output_beats_per_clock`` the same at the output, ``latency_first`` the cycles from the first input beat
to the first output beat (empty pipeline), ``latency_last`` from the last input beat to the last output
beat.
"""

import json

import cocotb
from cocotb.triggers import RisingEdge

from netreduce.tb.parser_tb import TB


@cocotb.test()
async def measure(dut):
    tb, frames = await TB.start(dut)
    params = tb.params
    nbytes = params["width"] // 8
    in_beats = sum(-(-len(f) // nbytes) for f in frames)
    cycle = 0
    seen = {"in": [], "out": []}

    async def observe():
        nonlocal cycle
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            if dut.s_axis__tvalid.value == 1 and dut.s_axis__tready.value == 1:
                seen["in"].append(cycle)
            if dut.m_axis__tvalid.value == 1 and dut.m_axis__tready.value == 1:
                seen["out"].append(cycle)
    cocotb.start_soon(observe())
    cocotb.start_soon(tb.send_all(frames))
    await tb.receive(len(frames), timeout_cycles=1000 + 4 * in_beats)
    await RisingEdge(dut.clk)
    ins, outs = seen["in"], seen["out"]
    assert len(ins) == in_beats
    result = {
        "frames": len(frames),
        "frame_bytes": sorted({len(f) for f in frames}),
        "input_beats": len(ins),
        "output_beats": len(outs),
        "input_beats_per_clock": round(len(ins) / (ins[-1] - ins[0] + 1), 4),
        "output_beats_per_clock": round(len(outs) / (outs[-1] - outs[0] + 1), 4),
        "latency_first": outs[0] - ins[0],
        "latency_last": outs[-1] - ins[-1],
    }
    with open(params["out"], "w") as out:
        json.dump(result, out)
