"""amaranth.sim unit tests of the RoCE deparser (``hw/deparser.py``), scored against the golden model
(``sim.roce_model.deparse_frame`` of what ``parse_frame`` gives).

The cocotb testbenches (tests/test_tb_parser.py) run the parser and deparser as a pipeline on the generated
Verilog; these tests exercise the Amaranth source directly, with idle cycles and backpressure.
"""

import pytest
from hypothesis import HealthCheck, given, settings

from netreduce.host.packets import build_roce_frame
from netreduce.hw.deparser import RoceDeparser
from netreduce.hw.stream import ParsedHeader, Verdict
from netreduce.sim import roce_model
from netreduce.sim.amaranth_streams import collect_frames, run, send_frames, send_records, shared_simulator

from references import FRAME_MIX, capture_sample, ip_versions_mix


def simulate_deparser(records, payloads, verdicts, width, *, idle=0.0, backpressure=0.0, seed=0, ipv6=True):
    dut, sim = shared_simulator(("RoceDeparser", width, ipv6), lambda: RoceDeparser(width, ipv6=ipv6))
    frames = []
    constants = [ParsedHeader.const(record) for record in records]
    verdict_constants = [Verdict.const(v) for v in verdicts]
    run(dut,
        [send_records(dut.hdr, constants, idle=idle, seed=seed),
         send_frames(dut.i, payloads, width // 8, idle=idle, seed=seed + 1, verdicts=verdict_constants)],
        [collect_frames(dut.o, width // 8, frames, backpressure=backpressure, seed=seed + 2)],
        until_idle=lambda: len(frames) == len(records), sim=sim)
    return [frame for frame, _ in frames]


def check_deparser(frames, width, *, ipv6=True, **knobs):
    parsed = [roce_model.parse_frame(frame, ipv6=ipv6) for frame in frames]
    out = simulate_deparser([p.header for p in parsed], [p.payload for p in parsed],
                            [p.verdict for p in parsed], width, ipv6=ipv6, **knobs)
    assert len(out) == len(frames)
    for index, (p, got) in enumerate(zip(parsed, out, strict=True)):
        expected = roce_model.deparse_frame(p.header, p.payload, p.verdict)
        assert got == expected, f"frame {index}: deparsed frame differs from the model"


# the captures through amaranth.sim: in the full suite only (as the parser's)
@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("width", [64, 512])
def test_deparser_on_captures(width):
    check_deparser(capture_sample(40 if width == 64 else 12, width + 1), width)


def test_deparser_with_idle_and_backpressure():
    check_deparser(capture_sample(16, 11), 64, idle=0.3, backpressure=0.4, seed=5)


@pytest.mark.parametrize("width", [pytest.param(64, marks=pytest.mark.slow(minutes=0.1)), 512])
def test_deparser_whole_frames_back_to_back(width):
    """With ``whole_frames`` and every record and payload there at one beat per clock, the frames leave
    right behind each other at one beat per clock: no pause inside a frame, and none between frames."""
    parsed = [roce_model.parse_frame(frame) for frame in capture_sample(30, 13)]
    dut = RoceDeparser(width, whole_frames=True)
    out, valid_cycles = [], []

    async def watch(ctx):
        cycle = 0
        while True:
            if ctx.get(dut.o.valid):        # the sink below is always ready
                valid_cycles.append(cycle)
            await ctx.tick()
            cycle += 1
    run(dut,
        [send_records(dut.hdr, [ParsedHeader.const(p.header) for p in parsed]),
         send_frames(dut.i, [p.payload for p in parsed], width // 8,
                     verdicts=[Verdict.const(p.verdict) for p in parsed])],
        [collect_frames(dut.o, width // 8, out), watch],
        until_idle=lambda: len(out) == len(parsed))
    assert [frame for frame, _ in out] == [roce_model.deparse_frame(p.header, p.payload, p.verdict)
                                          for p in parsed]
    start = valid_cycles[0]
    assert valid_cycles == list(range(start, start + len(valid_cycles))), "the output paused"


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_deparser_pads_short_frames(width):
    """A RoCE frame of the shortest headers (BTH only) and a payload of 0 to 8 bytes is padded to 60 bytes,
    wherever the beat that holds byte 59 starts (at 512 bits, the first)."""
    frames = [build_roce_frame(0x04, bytes(range(n))) for n in (0, 2, 4, 6, 8)]      # RC SEND Only
    check_deparser(frames, width)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=FRAME_MIX)
def test_deparser_hypothesis(frames):
    check_deparser(frames, 64, idle=0.1, backpressure=0.2)


@pytest.mark.parametrize("width", [64, 512])
def test_deparser_without_ipv6_rebuilds_what_that_parser_gives(width):
    check_deparser(ip_versions_mix(), width, ipv6=False, idle=0.2, backpressure=0.2, seed=width)


