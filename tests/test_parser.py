"""amaranth.sim unit tests of the RoCE parser (``hw/parser.py``), scored against the golden model
(``sim.roce_model.parse_frame``).

The cocotb testbenches (tests/test_tb_parser.py) run many more frames on the generated Verilog; these
tests exercise the Amaranth source directly, with idle cycles and backpressure.
"""

import random

import pytest
from hypothesis import HealthCheck, given, settings

from netreduce.hw.parser import RoceParser
from netreduce.sim import roce_model
from netreduce.sim.amaranth_streams import collect_frames, collect_records, run, send_frames, shared_simulator
from netreduce.wire import PARSED_HEADER_FIELDS, PAYLOAD_VERDICT_FIELDS

from references import FRAME_MIX, capture_sample, ip_versions_mix


def header_dict(record):
    return {name: int(getattr(record, name)) for name, _ in PARSED_HEADER_FIELDS}


def verdict_dict(record):
    return {name: int(getattr(record, name)) for name, _ in PAYLOAD_VERDICT_FIELDS}


def simulate_parser(frames, width, *, idle=0.0, backpressure=0.0, seed=0, ipv6=True):
    dut, sim = shared_simulator(("RoceParser", width, ipv6), lambda: RoceParser(width, ipv6=ipv6))
    headers, payloads = [], []
    run(dut,
        [send_frames(dut.i, frames, width // 8, idle=idle, seed=seed)],
        [collect_records(dut.hdr, headers, backpressure=backpressure, seed=seed + 1),
         collect_frames(dut.o, width // 8, payloads, backpressure=backpressure, seed=seed + 2)],
        until_idle=lambda: len(payloads) == len(frames) and len(headers) == len(frames), sim=sim)
    return [header_dict(h) for h in headers], [(p, verdict_dict(beat.verdict)) for p, beat in payloads]


def check_parser(frames, width, *, ipv6=True, **knobs):
    headers, payloads = simulate_parser(frames, width, ipv6=ipv6, **knobs)
    assert len(headers) == len(payloads) == len(frames)
    for index, (frame, header, (payload, verdict)) in enumerate(zip(frames, headers, payloads, strict=True)):
        expected = roce_model.parse_frame(frame, ipv6=ipv6)
        diff = {name: (header[name], expected.header[name]) for name in header
                if header[name] != expected.header[name]}
        assert not diff, f"frame {index}: header fields (rtl, model) differ: {diff}"
        assert verdict == expected.verdict, f"frame {index}: verdict {verdict} != model {expected.verdict}"
        assert payload == expected.payload, f"frame {index}: payload differs"


# the captures through amaranth.sim: some 19 s of one core in all, so in the full suite only (the fast
# tier keeps the generated frames, idle and backpressure; the Verilator testbenches take every capture)
@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("width", [64, 512])
def test_parser_on_captures(width):
    check_parser(capture_sample(40 if width == 64 else 12, width), width)


def test_parser_with_idle_and_backpressure():
    check_parser(capture_sample(16, 7), 64, idle=0.3, backpressure=0.4, seed=3)


@pytest.mark.parametrize("width", [64, 512])
def test_a_header_leaves_before_or_with_its_payload_s_first_beat(width):
    """Parser contract, rule 8: with frames back to back (the captures, and short frames that are not RoCE,
    one beat at 512 bits) and both outputs always taken, each frame's header record is handed over in the
    clock of its payload's first beat or earlier."""
    frames = capture_sample(24, width + 2) + [bytes(range(60)), bytes(64)] * 3
    dut = RoceParser(width, ipv6=False)
    headers, payloads, header_clocks, first_beat_clocks = [], [], [], []

    async def watch(ctx):
        clock = 0
        while True:
            if ctx.get(dut.hdr.valid) and ctx.get(dut.hdr.ready):
                header_clocks.append(clock)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready) and ctx.get(dut.o.payload.first):
                first_beat_clocks.append(clock)
            await ctx.tick()
            clock += 1
    run(dut,
        [send_frames(dut.i, frames, width // 8)],
        [collect_records(dut.hdr, headers), collect_frames(dut.o, width // 8, payloads), watch],
        until_idle=lambda: len(payloads) == len(frames) and len(headers) == len(frames))
    assert len(header_clocks) == len(first_beat_clocks) == len(frames)
    late = [(k, h, p) for k, (h, p) in enumerate(zip(header_clocks, first_beat_clocks, strict=True)) if h > p]
    assert not late, f"(frame, header's clock, first payload beat's clock) with the header late: {late}"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=FRAME_MIX)
def test_parser_hypothesis(frames):
    check_parser(frames, 64, idle=0.1, backpressure=0.2)


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow(minutes=0.1))])
def test_parser_without_ipv6_takes_an_ipv6_header_s_traffic_class_only(width):
    """Built without IPv6 RoCE, the parser gives what ``parse_frame(frame, ipv6=False)`` gives: an IPv6 frame
    is not RoCE (its whole frame is the payload) and its record holds the IP version and traffic class."""
    frames = ip_versions_mix()
    parsed = [roce_model.parse_frame(frame, ipv6=False) for frame in frames]
    assert any(p.header["ip_version"] == 6 and p.header["ip_dscp"] for p in parsed)
    assert not any(p.header["roce"] for p in parsed if p.header["ip_version"] == 6)
    assert any(p.header["roce"] for p in parsed)
    check_parser(frames, width, ipv6=False, idle=0.2, backpressure=0.2, seed=width)


@pytest.mark.parametrize("nbytes", [8, 24, 64, 128])
def test_keep_count_is_one_past_the_highest_lane_set(nbytes):
    """``keep_count`` (the parser's and the deparser's byte count of a beat, a tree of chains at wide beats):
    one past the highest lane set, 0 with none, for contiguous ``keep`` (every count) and any other."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator

    from netreduce.hw.parser import keep_count

    m = Module()
    keep = Signal(nbytes)
    count = keep_count(m, keep, nbytes)
    rng = random.Random(nbytes)
    cases = [(1 << n) - 1 for n in range(nbytes + 1)] + [1 << n for n in range(nbytes)]
    cases += [rng.getrandbits(nbytes) for _ in range(200)]

    async def bench(ctx):
        for value in cases:
            ctx.set(keep, value)
            assert ctx.get(count) == value.bit_length(), f"keep {value:#x}"

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
