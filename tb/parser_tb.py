"""cocotb testbenches of the generated Verilog of ``ParserTop`` and ``RocePipelineTop``.

Launched by tests/test_tb_parser.py through ``netreduce.sim.runner.run_cocotb``; the frames to send come
from a pcap named in the parameters (``frames``), each scored against the golden model:

- ``ParserTop``: every header record field by field, the payload bytes and the verdicts;
- ``RocePipelineTop``: every frame out byte for byte against ``deparse_frame(parse_frame(frame))``.

Parameters (``cocotb_params()``): ``top`` ("parser" or "pipeline"), ``width``, ``frames`` (pcap path),
``idle`` and ``backpressure`` (probabilities per cycle), ``seed``.
"""

import itertools
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.eth import EthMacRx, EthMacTx

from netreduce.host.pcap import read_pcap
from netreduce.hw.stream import ParsedHeader
from netreduce.sim import roce_model
from netreduce.sim.runner import cocotb_params
from netreduce.tb.harness_driver import HarnessDriver
from netreduce.wire import PARSED_HEADER_FIELDS, PAYLOAD_VERDICT_FIELDS

CLOCK_NS = 6.4      # 156.25 MHz, the 10G XGMII clock


def _pattern(probability, seed):
    """An endless pause pattern: True (pause) with the given probability."""
    rng = random.Random(seed)
    return (rng.random() < probability for _ in itertools.count())


class TB:
    STREAM_PORTS = ("s_axis", "m_axis")      # the prefixes of the AXI-Stream input and output

    def __init__(self, dut, params):
        self.dut = dut
        self.params = params
        self.log = logging.getLogger("cocotb.tb")
        self.width = params["width"]
        if hasattr(dut, "bypass"):         # a tb/harness.py build: its bus models drive the device directly
            dut.bypass.value = 1
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        self.source, self.sink = self.stream_port(*self.STREAM_PORTS)
        self.headers = []
        self.verdicts = []
        if hasattr(dut, "m_hdr__data"):
            self.header_rng = random.Random(params.get("seed", 0) + 2)
            cocotb.start_soon(self._collect_headers())
            cocotb.start_soon(self._collect_verdicts())

    def stream_port(self, source_prefix, sink_prefix, stream=0):
        """An AXI-Stream source and sink on the ports with these prefixes, with the random idle cycles
        and backpressure of ``params`` (seeded per ``stream``). With ``params["mac"]``, cocotbext-eth's
        MAC models instead, at the line rate of the bus (``width`` bits per clock): the receive side of
        a MAC sends each frame into the port after its preamble and the previous frame's inter-frame
        gap, and the transmit side takes the frames out, failing the test if a frame pauses in the
        middle (a MAC cannot)."""
        dut, params = self.dut, self.params
        source_bus = AxiStreamBus.from_prefix(dut, source_prefix, bus_separator="__")
        sink_bus = AxiStreamBus.from_prefix(dut, sink_prefix, bus_separator="__")
        if params.get("mac"):
            speed = self.width / CLOCK_NS * 1e9
            macs = (EthMacRx(source_bus, dut.clk, dut.rst, speed=speed),
                    EthMacTx(sink_bus, dut.clk, dut.rst, speed=speed))
            for mac in macs:
                mac.log.setLevel(logging.WARNING)      # not a line per frame
            return macs
        source = AxiStreamSource(source_bus, dut.clk, dut.rst)
        sink = AxiStreamSink(sink_bus, dut.clk, dut.rst)
        seed = params.get("seed", 0) + 10 * stream
        if params.get("idle"):
            source.set_pause_generator(_pattern(params["idle"], seed))
        if params.get("backpressure"):
            sink.set_pause_generator(_pattern(params["backpressure"], seed + 1))
        return source, sink

    async def _collect_headers(self):
        dut = self.dut
        backpressure = self.params.get("backpressure", 0)
        while True:
            ready = self.header_rng.random() >= backpressure
            dut.m_hdr__ready.value = int(ready)
            await RisingEdge(dut.clk)
            if ready and dut.m_hdr__valid.value == 1:
                self.headers.append(dut.m_hdr__data.value.to_unsigned())

    async def _collect_verdicts(self):
        """The verdicts ride on ``tuser`` of the last beat (cocotbext-axi keeps ``tuser`` per byte and
        so loses it on an empty last beat): sample them at every last-beat handshake."""
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            if dut.m_axis__tvalid.value == 1 and dut.m_axis__tready.value == 1 and dut.m_axis__tlast.value == 1:
                self.verdicts.append(dut.m_axis__tuser.value.to_unsigned())

    @classmethod
    async def start(cls, dut, params=None):
        """The usual opening of a test: the bench (clock, bus models) on ``params`` (by default those
        of :func:`cocotb_params`), a reset, and the frames of the pcap ``params["frames"]``."""
        tb = cls(dut, cocotb_params() if params is None else params)
        await tb.reset()
        return tb, read_pcap(tb.params["frames"])

    async def reset(self):
        self.dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def send_all(self, frames):
        for frame in frames:
            await self.source.send(AxiStreamFrame(frame))

    async def receive(self, count, timeout_cycles, sink=None):
        """``count`` frames from the sink (``self.sink`` unless given); fails (never hangs) if they take
        over ``timeout_cycles``."""
        sink = self.sink if sink is None else sink

        async def all_frames():
            return [await sink.recv() for _ in range(count)]
        try:
            return await with_timeout(all_frames(), round(timeout_cycles * CLOCK_NS * 1000), "ps")
        except SimTimeoutError:
            raise AssertionError(f"fewer than {count} frames came out within {timeout_cycles} cycles; "
                                 f"{sink.count()} waiting") from None


def header_dict(value):
    record = ParsedHeader.from_bits(value)
    return {name: int(getattr(record, name)) for name, _ in PARSED_HEADER_FIELDS}


def verdict_dict(tuser_last):
    return {name: (tuser_last >> bit) & 1 for bit, (name, _) in enumerate(PAYLOAD_VERDICT_FIELDS)}


async def play(dut, params, frames, *, pauses=True):
    """``frames`` through the device in bulk (tb/harness.py), with the idle cycles and backpressure of
    ``params`` when ``pauses``; returns the harness driver once every frame has come out of ``m_axis``
    and ten more clocks have passed."""
    bench = HarnessDriver(dut, params["harness"], clock_ns=CLOCK_NS)
    dut.bypass.value = 0
    await bench.start(idle=params.get("idle", 0.0) if pauses else 0.0,
                      backpressure=params.get("backpressure", 0.0) if pauses else 0.0, seed=params.get("seed", 0))
    for frame in frames:
        bench.queue(0, frame)
    await bench.run(lambda: len(bench.recorders[0].frames) >= len(frames),
                    timeout_clocks=1000 + 20 * sum(len(f) for f in frames))
    await bench.settle(10)
    return bench


@cocotb.test()
async def frames_against_model(dut):
    params = cocotb_params()
    frames = read_pcap(params["frames"])
    bench = await play(dut, params, frames)
    received = bench.recorders[0].frames
    headers = bench.recorders[1].frames if params["top"] == "parser" else []

    failures = []
    for index, (frame, got) in enumerate(zip(frames, received, strict=False)):
        expected = roce_model.parse_frame(frame)
        if params["top"] == "pipeline":
            want = roce_model.deparse_frame(expected.header, expected.payload, expected.verdict)
            if got.data != want:
                failures.append(f"frame {index}: output {got.data.hex()} != model {want.hex()}")
            continue
        header = header_dict(headers[index].data)
        diff = {k: (header[k], expected.header[k]) for k in header if header[k] != expected.header[k]}
        if diff:
            failures.append(f"frame {index}: header (rtl, model) {diff}")
        if got.data != expected.payload:
            failures.append(f"frame {index}: payload {got.data.hex()} != {expected.payload.hex()}")
        verdict = verdict_dict(got.user)
        if verdict != expected.verdict:
            failures.append(f"frame {index}: verdict {verdict} != {expected.verdict}")
    for failure in failures[:20]:
        dut._log.error(failure)
    assert not failures, f"{len(failures)} mismatches against the golden model"
    assert len(received) == len(frames), "frames beyond those sent"
    if params["top"] == "parser":
        assert len(headers) == len(frames), "a header record per frame"


@cocotb.test()
async def line_rate(dut):
    """Back-to-back frames with no idle cycle and no backpressure: the input never stalls (no clock in
    which a beat was offered and not taken)."""
    params = cocotb_params()
    if params.get("idle") or params.get("backpressure"):
        return
    frames = read_pcap(params["frames"])
    bench = await play(dut, params, frames)
    stamps = bench.players[0].stamps
    stalls = sum(stamp["refused"] for stamp in stamps)
    beats = sum(-(-len(f) // (params["width"] // 8)) for f in frames)
    dut._log.info("line rate: %d beats in %d clocks, %d stall cycles (%.1f s exchanging with the harness)", beats,
                  stamps[-1]["last"] - stamps[0]["first"] + 1, stalls, bench.exchange_seconds)
    assert len(stamps) == len(frames)
    assert stalls == 0, f"the input stalled for {stalls} cycles on {beats} back-to-back beats"
    assert stamps[-1]["last"] - stamps[0]["first"] + 1 == beats


@cocotb.test()
async def dump_records(dut):
    """For ``netreduce parse-pcap``: every frame through ``ParserTop`` back to back; one JSON line per
    frame (the header record as an integer, the verdict bits) to the file ``params["out"]``."""
    import json
    params = cocotb_params()
    if "out" not in params:
        return
    frames = read_pcap(params["frames"])
    bench = await play(dut, params, frames, pauses=False)
    headers, payloads = bench.recorders[1].frames, bench.recorders[0].frames
    assert len(headers) == len(payloads) == len(frames)
    with open(params["out"], "w") as out:
        for header, payload in zip(headers, payloads, strict=True):
            out.write(json.dumps({"header": str(header.data), "verdict": payload.user}) + "\n")


@cocotb.test()
async def simulation_speed(dut):
    """Not a check but a measurement (benchmarks/bench_sim.py): the frames through the device, in bulk
    (``mode`` "bulk") or clock by clock through cocotbext-axi (``mode`` "clock"), with the idle cycles and
    backpressure of the parameters; writes the simulated clocks and the wall time as JSON to ``out``."""
    import json
    import time

    from cocotb.utils import get_sim_time
    params = cocotb_params()
    frames = read_pcap(params["frames"])
    timeout = 1000 + 20 * sum(len(f) for f in frames)
    if params["mode"] == "bulk":
        wall = time.perf_counter()
        bench = await play(dut, params, frames)
        wall, clocks = time.perf_counter() - wall, bench.cycle
        received = [frame.data for frame in bench.recorders[0].frames]
    else:
        tb = TB(dut, params)
        await tb.reset()
        start, wall = get_sim_time("ns"), time.perf_counter()
        cocotb.start_soon(tb.send_all(frames))
        received = [bytes(frame.tdata) for frame in await tb.receive(len(frames), timeout)]
        wall, clocks = time.perf_counter() - wall, round((get_sim_time("ns") - start) / CLOCK_NS)
    assert len(received) == len(frames)
    with open(params["out"], "w") as out:
        json.dump({"clocks": clocks, "frames": 2 * len(frames), "wall_seconds": wall}, out)
