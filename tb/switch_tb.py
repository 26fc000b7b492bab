"""cocotb testbench of the generated Verilog of ``NetReduceSwitch``, scored against the golden model.

Launched by tests/test_tb_switch.py through ``netreduce.sim.runner.run_cocotb``. The scenario (a pickle
named by the ``scenario`` parameter) holds the switch configuration, the frames that reached the switch
in an all-reduce run on the golden model, in order, and what the model sent out for each. The testbench
loads the configuration through the control registers, sends the same frames (with random idle cycles
when ``idle`` is set), takes the frames out (with random backpressure when ``backpressure`` is set),
and checks them against the model's, frame for frame and byte for byte, then every counter; no frame
out may pause in the middle (a MAC's transmit side could not). With ``mac`` set, cocotbext-eth's MAC
models sit on the ports instead (``TB.stream_port`` of the parser testbench): frames go in paced at the
line rate, with preamble and inter-frame gap, and the switch may not hold any of them back.
"""

import collections
import json
import pickle

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

from netreduce.egress import (
    CLASSES,
    LAYER_GROUPS,
    MAGNITUDE_BUCKETS,
    default_class_of_frame,
    default_queue_of_frame,
    drop_level,
    lossy_class,
)
from netreduce.host.protocol import AggHeader
from netreduce.registers import COUNTERS, READ_LATENCY, address, block, counter_address, switch_config_writes
from netreduce.sim.roce_model import parse_frame
from netreduce.sim.runner import cocotb_params
from netreduce.sim.switch_model import SwitchModel
from netreduce.tb.harness_driver import HarnessDriver, HarnessTimeout
from netreduce.tb.parser_tb import CLOCK_NS, TB as StreamTB
from netreduce.wire import UC_WRITE_OPCODES

_LOSSY_OPCODE = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]


def frames_sent(scenario):
    """Every frame the recording's model sent, in the order it sent them: the frames sent at a deadline
    (``expired``) before the frame in that came after them, each frame in's own after it."""
    expired = collections.defaultdict(list)
    for inputs_before, produced in scenario.get("expired", ()):
        expired[inputs_before].extend(produced)
    for i, produced in enumerate(scenario["outputs"]):
        yield from expired.pop(i, ())
        yield from produced
    for i in sorted(expired):
        yield from expired[i]


def gates_past_droppable(scenario):
    """The recording's gates (``after``: the frames out before each frame in), counting only the frames out
    that the egress stage may not drop: not the bounded-loss results."""
    kept = [0]
    for _, frame in frames_sent(scenario):
        kept.append(kept[-1] + (parse_frame(frame).header["bth_opcode"] != _LOSSY_OPCODE))
    return [kept[needed] for needed in scenario["after"]]


class Registers:
    """The switch's control registers through its ``csr`` port, one access a clock."""

    def __init__(self, dut):
        self.dut = dut
        dut.csr__we.value = 0
        dut.csr__addr.value = 0
        dut.csr__wdata.value = 0

    async def write(self, address, value):
        self.dut.csr__addr.value = address
        self.dut.csr__wdata.value = value & 0xFFFFFFFF
        self.dut.csr__we.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.csr__we.value = 0

    async def read(self, address):
        """The word at ``address``: ``rdata`` shows it READ_LATENCY clocks after the address (read a clock
        later still, past the edge)."""
        self.dut.csr__addr.value = address
        for _ in range(READ_LATENCY + 1):
            await RisingEdge(self.dut.clk)
        return self.dut.csr__rdata.value.to_unsigned()

    async def counters(self):
        return {name: await self.read(counter_address(name)) for name in COUNTERS}

    async def configure(self, config, workers, forwarding_entries):
        """Load a ``SwitchConfig`` (jobs by position; connection c = job position * N + worker)."""
        assert len(config.forwarding) <= forwarding_entries, "more MACs than forwarding entries"
        for at, word in switch_config_writes(config, workers):
            await self.write(at, word)


class TB(StreamTB):
    """The parser testbench's clock, AXI-Stream source and sink, pauses and reset, plus a source and a
    sink on every further port (``sources[p]``, ``sinks[p]``) and the control registers (``registers``):
    the clock-by-clock bench, for cocotbext-eth's MAC models and the interactive closed loop."""

    STREAM_PORTS = ("s_axis__0", "m_axis__0")

    def __init__(self, dut, params):
        super().__init__(dut, params)
        self.ports = params.get("ports", 1)
        self.sources, self.sinks = [self.source], [self.sink]
        for p in range(1, self.ports):
            source, sink = self.stream_port(f"s_axis__{p}", f"m_axis__{p}", stream=p)
            self.sources.append(source)
            self.sinks.append(sink)
        self.registers = Registers(dut)

    async def configure(self, config, workers):
        await self.registers.configure(config, workers, self.params["forwarding_entries"])

    async def read(self, address):
        return await self.registers.read(address)

    async def receive_ports(self, counts, timeout_cycles):
        """``counts[p]`` frames (bytes) from each port's sink; fails if they take over ``timeout_cycles``
        in all."""
        deadline = get_sim_time("ns") + timeout_cycles * CLOCK_NS
        got = []
        for sink, count in zip(self.sinks, counts, strict=True):
            left = max(1, round((deadline - get_sim_time("ns")) / CLOCK_NS))
            got.append([frame_bytes(frame) for frame in await self.receive(count, left, sink)])
        return got

    def _buses(self, prefix):
        """(tvalid, tready, tlast) of each AXI-Stream port ``prefix``__p."""
        return [(getattr(self.dut, f"{prefix}__{p}__tvalid"), getattr(self.dut, f"{prefix}__{p}__tready"),
                 getattr(self.dut, f"{prefix}__{p}__tlast")) for p in range(self.ports)]

    def _count(self, prefix, event):
        """Clocks of ``event(tvalid, tready, tlast)`` (values 0 or 1) on the AXI-Stream ports ``prefix``__p
        so far, summed over the ports each clock: a list of one counter, read by the caller, and the
        counting task."""
        buses = self._buses(prefix)
        total = [0]

        async def count():
            while True:
                await RisingEdge(self.dut.clk)
                total[0] += sum(event(v.value == 1, r.value == 1, t.value == 1) for v, r, t in buses)
        return total, cocotb.start_soon(count())

    def _pauses_in_frames(self, prefix):
        """Clocks in which a frame on a port ``prefix``__p had begun and not ended and no beat was
        offered (a list of one counter, and the counting task; see ``_count``)."""
        buses = self._buses(prefix)
        inside = [False] * self.ports
        total = [0]

        async def count():
            while True:
                await RisingEdge(self.dut.clk)
                for p, (valid, ready, last) in enumerate(buses):
                    if valid.value != 1:
                        total[0] += inside[p]
                    elif ready.value == 1:
                        inside[p] = last.value != 1
        return total, cocotb.start_soon(count())

    def _frame_ends(self, prefix):
        """Frames through the ports ``prefix``__p so far (see ``_count``)."""
        return self._count(prefix, lambda valid, ready, last: valid and ready and last)

    async def replay(self, inputs, after):
        """Send ``inputs`` ((port, frame) pairs), each once the switch has sent ``after[i]`` frames: the
        recorded traffic's own causality (``netreduce.host.network``), so that no ACK overtakes the
        result it acknowledges. Frames on several ports also wait each until the one before it is in,
        so that the switch takes them in the model's order."""
        sent, sent_task = self._frame_ends("m_axis")
        taken, taken_task = self._frame_ends("s_axis")
        one_by_one = len({port for port, _ in inputs}) > 1
        for index, ((port, frame), needed) in enumerate(zip(inputs, after, strict=True)):
            while sent[0] < needed or (one_by_one and taken[0] < index):
                await RisingEdge(self.dut.clk)
            await self.sources[port].send(frame)
        sent_task.cancel()
        taken_task.cancel()

    async def replay_and_check(self, scenario):
        """Replay a recorded scenario; every frame out of every port equal to the model's. Returns the
        frames out, a list per port."""
        expected = [[frame for produced in scenario["outputs"] for port, frame in produced if port == p]
                    for p in range(self.ports)]
        cocotb.start_soon(self.replay(scenario["inputs"], scenario["after"]))
        cycles = 2000 + 4 * sum(len(f) for _, f in scenario["inputs"]) + 4 * sum(map(len, sum(expected, [])))
        got = await self.receive_ports([len(e) for e in expected], cycles)
        for p in range(self.ports):
            check_port(got[p], expected[p], self.params.get("egress_queues", 4))
        return got


def frame_bytes(frame):
    """The bytes of a frame from an AXI-Stream sink or a MAC model."""
    return bytes(frame.tdata if hasattr(frame, "tdata") else frame.data)


def check_port(got, expected, queues, droppable=False):
    """The frames out of one port against the model's: equal, and in the model's order within each queue
    of the port's egress stage (default map: a frame of a higher-priority queue, such as a CREDIT, may
    overtake frames of lower ones; docs/ARCHITECTURE.md, "Egress stage (MLT)"). With ``droppable``, the
    egress stage may have dropped bounded-loss results (UC WRITE ONLY with immediate, the frames the switch
    marks ``lossy``) whole: the frames out are then the model's with some of those left out, and the ones
    left out are returned."""
    by_queue = [([], []) for _ in range(queues)]
    for side, frames in enumerate((got, expected)):
        for frame in frames:
            by_queue[default_queue_of_frame(frame, queues)][side].append(frame)
    dropped = []
    for got_q, expected_q in by_queue:
        if not droppable:
            check_frames(got_q, expected_q)
            continue
        left = iter(expected_q)
        for index, frame in enumerate(got_q):
            for wanted in left:
                if wanted == frame:
                    break
                assert parse_frame(wanted).header["bth_opcode"] == _LOSSY_OPCODE, \
                    f"output {index}: a frame the egress stage may not drop is missing: {wanted.hex()}"
                dropped.append(wanted)
            else:
                raise AssertionError(f"output {index} is none of the model's frames left: {frame.hex()}")
        for wanted in left:
            assert parse_frame(wanted).header["bth_opcode"] == _LOSSY_OPCODE, \
                f"a frame the egress stage may not drop is missing at the end: {wanted.hex()}"
            dropped.append(wanted)
    return dropped


async def check_egress_counters(registers, expected, queues, dropped=None):
    """Each port's egress counters: the frames and bytes the model sent out of it, by class, and the frames
    of ``dropped[p]`` (none when ``None``) counted as drops of their class."""
    for p, frames in enumerate(expected):
        for c in range(CLASSES):
            ours = [f for f in frames if default_class_of_frame(f) == c]
            lost = [f for f in (dropped[p] if dropped else []) if default_class_of_frame(f) == c]
            want = {"frames_out": len(ours), "bytes_out": sum(map(len, ours)), "drops": len(lost)}
            got = {name: await registers.read(address("egress", p, f"{name}{c}"))
                   for name in ("frames_out", "bytes_out")}
            got["drops"] = sum([await registers.read(address("egress", p, f"{name}{c}"))
                                for name in ("drops_threshold", "drops_full")])
            assert got == want, f"port {p}, class {c}: egress counters (rtl) {got}, from the model's frames {want}"
        assert await registers.read(address("egress", p, "drops_oversize")) == 0, f"port {p}: oversize drops"


async def egress_drops(registers, ports):
    """Each port's frames dropped by its egress stage (every class, both reasons)."""
    return [sum([await registers.read(address("egress", p, f"{name}{c}"))
                 for name in ("drops_threshold", "drops_full") for c in range(CLASSES)]) for p in range(ports)]


def check_frames(got, expected):
    """Every frame out equals the model's; else the count of differences and the first one."""
    mismatches = [i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b]
    if mismatches:
        first = mismatches[0]
        raise AssertionError(f"{len(mismatches)} of {len(expected)} frames differ; first: output {first}\n"
                             f"  rtl:   {got[first].hex()}\n  model: {expected[first].hex()}")


class Replay:
    """A recorded scenario played into the switch in bulk through tb/harness.py (the simulator runs free
    between exchanges): each frame on its port once the switch has sent the frames it waited for in the
    recording (``after``), and, when frames arrive on several ports, once the frame before it is in, so
    that the switch takes them in the model's order."""

    def __init__(self, dut, params, scenario):
        self.dut, self.params, self.scenario = dut, params, scenario
        dut.bypass.value = 0
        self.registers = Registers(dut)
        self.bench = HarnessDriver(dut, params["harness"], clock_ns=CLOCK_NS)
        self.ports = params.get("ports", 1)
        self.expected = [[frame for produced in scenario["outputs"] for port, frame in produced if port == p]
                         for p in range(self.ports)]

    async def start(self):
        params = self.params
        await self.bench.start(idle=params.get("idle", 0.0), backpressure=params.get("backpressure", 0.0),
                               seed=params.get("seed", 0), line_rate=params.get("line_rate", 0))
        if not self.scenario.get("in_band"):        # else its first frames configure the switch
            await self.registers.configure(self.scenario["config"], params["workers"], params["forwarding_entries"])
        await FallingEdge(self.dut.clk)

    def queue(self, gates=None, *, in_order=True):
        """Queue every frame on its port's player, each waiting for ``gates[i]`` frames out (the recording's
        ``after`` by default) and, with frames on several ports and ``in_order``, for the frame before it to
        be in."""
        inputs = self.scenario["inputs"]
        one_by_one = in_order and len({port for port, _ in inputs}) > 1
        gates = self.scenario["after"] if gates is None else gates
        for index, ((port, frame), needed) in enumerate(zip(inputs, gates, strict=True)):
            self.bench.queue(port, frame, after_out=needed, after_in=index if one_by_one else 0)

    async def play(self, *, in_order=True):
        """Play every frame in and take every expected frame out; the frames out, a list per port. Without
        ``in_order`` the ports' frames go in as fast as the switch takes them from each port (the
        recording's ``after`` still holds each back until what it answers has come out), in whatever
        order the switch's arbiter takes them."""
        inputs = self.scenario["inputs"]
        self.queue(in_order=in_order)
        recorders = self.bench.recorders
        cycles = 2000 + 4 * sum(len(f) for _, f in inputs) + 4 * sum(map(len, sum(self.expected, [])))
        expected = self.expected
        await self.bench.run(lambda: all(len(r.frames) >= len(e) for r, e in zip(recorders, expected, strict=True)),
                             timeout_clocks=cycles)
        return [[frame.data for frame in recorder.frames] for recorder in recorders]


@cocotb.test()
async def scenario_against_model(dut):
    """Every frame out of every port equal to the model's, none more, no frame out pausing in the
    middle, and every counter equal to the model's. With ``mac``, cocotbext-eth's MAC models clock by
    clock (``TB``); otherwise the harness in bulk (``Replay``)."""
    params = cocotb_params()
    with open(params["scenario"], "rb") as file:
        scenario = pickle.load(file)
    if params.get("mac"):
        await scenario_through_macs(dut, params, scenario)
        return
    replay = Replay(dut, params, scenario)
    await replay.start()
    got = await replay.play()
    await replay.bench.settle(200)                  # nothing more may come out
    queues = params.get("egress_queues", 4)
    for p, recorder in enumerate(replay.bench.recorders):
        check_port(got[p], replay.expected[p], queues)
        assert len(recorder.frames) == len(replay.expected[p]), \
            f"port {p}: {len(recorder.frames) - len(replay.expected[p])} frames more than the model sent"
        assert recorder.pauses == 0, f"port {p}: frames out paused for {recorder.pauses} clocks in the middle"
    await check_counters(replay.registers, scenario)
    await check_egress_counters(replay.registers, replay.expected, queues)
    dut._log.info("%d frames in, %s out (by port), all equal to the model's; counters equal",
                  len(scenario["inputs"]), [len(g) for g in got])


async def check_counters(registers, scenario):
    counts = await registers.counters()
    differ = {name: (counts[name], scenario["counters"][name]) for name in COUNTERS
              if counts[name] != scenario["counters"][name]}
    assert not differ, f"counters (rtl, model): {differ}"


@cocotb.test()
async def timed_against_model(dut):
    """A scenario whose outcome depends on time (the bounded-loss class's deadlines): played like
    ``scenario_against_model`` (the recording's causality kept), then the golden model is run again on the
    frames as the switch took them, each at its arrival, the clock its first beat went in (the switch's
    clock and the harness's both count from reset), and the clock moved to the end of the run; every frame out
    of every port and every counter equal to that run's. The run goes on until every frame is in and then
    for ``settle`` clocks (past the last deadline)."""
    params = cocotb_params()
    with open(params["scenario"], "rb") as file:
        scenario = pickle.load(file)
    replay = Replay(dut, params, scenario)
    await replay.start()
    if params.get("threshold_step"):
        # drop thresholds through the registers: drop level l below ``drop_levels`` at (l + 1) steps of beats of
        # the port's buffer, the other levels never
        never = (1 << block("egress").register("class0_threshold").bits) - 1
        for p in range(replay.ports):
            for g in range(LAYER_GROUPS):
                for b in range(MAGNITUDE_BUCKETS):
                    level = drop_level(g, b)
                    threshold = (level + 1) * params["threshold_step"] if level < params["drop_levels"] else never
                    await replay.registers.write(address("egress", p, f"class{lossy_class(g, b)}_threshold"),
                                                 threshold)
    inputs = scenario["inputs"]
    gates = scenario["after"]
    if params.get("drops"):
        # results the egress stage drops never come out: each frame waits only for the recording's frames
        # out that cannot be dropped (its CREDITs), so that no gate waits for ever
        gates = gates_past_droppable(scenario)
    replay.queue(gates)
    players = replay.bench.players
    await replay.bench.run(lambda: sum(len(p.stamps) for p in players) == len(inputs),
                           timeout_clocks=2000 + 8 * sum(len(f) for _, f in inputs) + params["settle"])
    await replay.bench.settle(params["settle"])
    end = replay.bench.cycle
    stamps = [iter(player.stamps) for player in players]
    arrivals = [next(stamps[port])["first"] for port, _ in inputs]     # of each input, in the scenario's order
    if params.get("arrivals_out"):
        with open(params["arrivals_out"], "w") as out:
            json.dump(arrivals, out)
    taken = sorted((arrival, index) for index, arrival in enumerate(arrivals))
    model = SwitchModel(scenario["config"])
    expected = [[] for _ in range(replay.ports)]
    for arrival, index in taken:
        port, frame = inputs[index]
        for out_port, out in model.receive(port, frame, now=arrival):
            expected[out_port].append(out)
    for out_port, out in model.advance(end):
        expected[out_port].append(out)
    got = [[frame.data for frame in recorder.frames] for recorder in replay.bench.recorders]
    queues = params.get("egress_queues", 4)
    dropped = []
    for p, recorder in enumerate(replay.bench.recorders):
        dropped.append(check_port(got[p], expected[p], queues, droppable=True))
        assert recorder.pauses == 0, f"port {p}: frames out paused for {recorder.pauses} clocks in the middle"
    await check_counters(replay.registers, {"counters": model.counters})
    await check_egress_counters(replay.registers, got, queues, dropped)
    if params.get("deadlines"):
        assert model.counters["deadline_completions"] > 0, "no deadline fired"
    if params.get("drops_out"):
        # by class: the frames the stages may drop that the model sent, and the stages' drop counters
        by_class = collections.defaultdict(lambda: {"offered": 0, "drops_threshold": 0, "drops_full": 0})
        for p in range(replay.ports):
            for frame in expected[p]:
                if parse_frame(frame).header["bth_opcode"] == _LOSSY_OPCODE:
                    by_class[default_class_of_frame(frame)]["offered"] += 1
            for c in list(by_class):
                for name in ("drops_threshold", "drops_full"):
                    by_class[c][name] += await replay.registers.read(address("egress", p, f"{name}{c}"))
        # and the queueing: for each bounded-loss result out, its egress queue and the clocks from its message's
        # first contribution in to its first beat out
        opened = {}
        for arrival, index in taken:
            parsed = parse_frame(inputs[index][1])
            header = AggHeader.unpack(parsed.payload)
            if parsed.header["bth_opcode"] == _LOSSY_OPCODE and header is not None:
                opened.setdefault((header.job, header.msg_seq), arrival)
        waits = []
        for recorder in replay.bench.recorders:
            for frame in recorder.frames:
                parsed = parse_frame(frame.data)
                header = AggHeader.unpack(parsed.payload)
                if parsed.header["bth_opcode"] == _LOSSY_OPCODE and (header.job, header.msg_seq) in opened:
                    waits.append((default_queue_of_frame(frame.data, queues),
                                  frame.first - opened[header.job, header.msg_seq]))
        with open(params["drops_out"], "w") as out:
            json.dump({"classes": by_class, "waits": waits}, out)
    if params.get("no_deadlines"):
        assert model.counters["deadline_completions"] == 0, "a deadline fired"
    if params.get("drops"):
        assert any(dropped), "the egress stage dropped nothing"
    if params.get("late"):
        counters = model.counters
        assert counters["late"] and counters["contributors_2"], f"not both sides of the deadline: {counters}"
    dut._log.info("%d frames in, %s out (by port), all equal to the model's run at the switch's arrivals; "
                  "deadline completions %d; %s dropped by the egress stages", len(inputs), [len(g) for g in got],
                  model.counters["deadline_completions"], [len(d) for d in dropped])


async def scenario_through_macs(dut, params, scenario):
    """The scenario through cocotbext-eth's MAC models, paced at the line rate: a MAC's receive side
    cannot wait, so the switch may never refuse a beat; its transmit side cannot pause inside a frame."""
    tb = TB(dut, params)
    await tb.reset()
    await tb.configure(scenario["config"], params["workers"])   # the build's N
    refused, _ = tb._count("s_axis", lambda valid, ready, last: valid and not ready)
    paused, _ = tb._pauses_in_frames("m_axis")
    got = await tb.replay_and_check(scenario)
    tb.log.info("input refused in %d clocks, output paused inside a frame in %d", refused[0], paused[0])
    assert paused[0] == 0, f"frames out paused for {paused[0]} clocks in the middle"
    assert refused[0] == 0, f"the switch held back the MAC's frames for {refused[0]} clocks"
    for _ in range(200):                    # nothing more may come out
        await RisingEdge(dut.clk)
    for p, sink in enumerate(tb.sinks):
        assert sink.empty(), f"port {p}: {sink.count()} frames more than the model sent"
    await check_counters(tb.registers, scenario)
    await check_egress_counters(tb.registers, [[f for produced in scenario["outputs"] for port, f in produced
                                                if port == p] for p in range(tb.ports)],
                                params.get("egress_queues", 4))
    tb.log.info("%d frames in, %s out (by port), all equal to the model's; counters equal",
                len(scenario["inputs"]), [len(g) for g in got])


@cocotb.test()
async def measure(dut):
    """Not a check but a measurement (benchmarks/bench_switch.py): the scenario's frames as fast as the
    switch takes them and their causality allows (``Replay``), the sink always ready; writes throughput
    and latency figures as JSON to ``out``. The input rate is measured over the frames that were offered
    back to back (sent before any frame came out of the switch), the output rate over every frame out;
    ``input_refused_clocks`` counts the clocks in which the switch held a beat of those frames back
    (``..._after``: of the later ones, ACKs queued behind the results). ``simulated_clocks`` and
    ``wall_seconds`` are of the replay alone. ``ports`` gives each port's input rate (over its frames among
    those offered back to back) and output rate. With ``ports_at_once`` the ports' frames go in without
    waiting for one another (``Replay.play``), so that the switch's arbiter decides their order: each port's
    frames out must then be the model's in any order. With ``line_rate`` (bits a clock) each port's frames come
    at a line's pace (``tb.harness.Player``), and each port's ``line_backlog_bytes`` (max and last over its
    frames offered back to back) say how far its line got ahead of the frames the switch took: what a MAC's
    receive buffer would have held."""
    import json
    import time

    params = cocotb_params()
    with open(params["scenario"], "rb") as file:
        scenario = pickle.load(file)
    replay = Replay(dut, params, scenario)
    await replay.start()
    start, wall = replay.bench.cycle, time.perf_counter()
    in_order = not params.get("ports_at_once")
    try:
        got = await replay.play(in_order=in_order)
    except HarnessTimeout as timeout:
        # (frames the egress stages dropped never come: say so, rather than only that the run timed out)
        dropped = await egress_drops(replay.registers, replay.ports)
        if any(dropped):
            raise AssertionError(f"{timeout}; the egress stages dropped {dropped} frames (by port), which the "
                                 "model's recording does not: a measurement needs a run without drops "
                                 "(timed_against_model holds one with them to the model)") from timeout
        raise
    wall, clocks = time.perf_counter() - wall, replay.bench.cycle - start
    for p in range(replay.ports):
        if in_order:
            check_port(got[p], replay.expected[p], params.get("egress_queues", 4))
        else:       # the arbiter's order across ports: each port's frames out the same, in any order
            assert sorted(got[p]) == sorted(replay.expected[p]), f"port {p}: other frames out than the model's"
    beat_bytes = params["port_width"] // 8      # the ports' beats (narrower than the core's or not)

    def beats(frame):
        return -(-max(len(frame), 1) // beat_bytes)

    # each input frame's stamp: its player's stamps are in the order of that port's frames
    port_stamps = [iter(player.stamps) for player in replay.bench.players]
    stamps = [next(port_stamps[port]) for port, _ in scenario["inputs"]]
    outs = sorted((f for recorder in replay.bench.recorders for f in recorder.frames), key=lambda f: f.first)
    output_beats = sum(beats(f.data) for f in outs)
    # latency: from the last beat of each frame that completed a slot to the first beat of its first result
    # (frames are found by their bytes: the egress stage may reorder frames of different queues)
    by_bytes = collections.defaultdict(collections.deque)
    for frame in outs:
        by_bytes[bytes(frame.data)].append(frame)
    latencies = []
    for index, produced in enumerate(scenario["outputs"]):
        first_out = by_bytes[produced[0][1]].popleft() if produced else None
        if scenario["results"][index]:
            latencies.append(first_out.first - stamps[index]["last"])
        for _, frame in produced[1:]:
            by_bytes[frame].popleft()
    latencies.sort()
    frames = [frame for _, frame in scenario["inputs"]]
    offered = next((i for i, needed in enumerate(scenario["after"]) if needed), len(frames))
    offered_beats = sum(beats(frame) for frame in frames[:offered])
    per_port = []
    for p, (player, recorder) in enumerate(zip(replay.bench.players, replay.bench.recorders, strict=True)):
        mine = [frame for port, frame in scenario["inputs"][:offered] if port == p]
        taken = player.stamps[:len(mine)]
        beats_out = sum(beats(f.data) for f in recorder.frames)
        per_port.append({
            "input_beats_per_clock": round(sum(beats(f) for f in mine)
                                           / (taken[-1]["last"] - taken[0]["first"] + 1), 4) if mine else None,
            "output_beats_per_clock": round(beats_out / (recorder.frames[-1].last - recorder.frames[0].first + 1), 4)
            if recorder.frames else None})
        if params.get("line_rate") and taken:
            per_port[-1]["line_backlog_bytes"] = {"max": max(s["line_ahead"] for s in taken) // 8,
                                                  "last": taken[-1]["line_ahead"] // 8}
    result = {
        "frames_in": len(frames), "frames_out": len(outs),
        "input_beats": sum(beats(frame) for frame in frames),
        "output_beats": output_beats,
        "offered_frames": offered,
        "input_beats_per_clock": round(offered_beats / (max(s["last"] for s in stamps[:offered])
                                                        - min(s["first"] for s in stamps[:offered]) + 1), 4),
        "input_refused_clocks": sum(s["refused"] for s in stamps[:offered]),
        "input_refused_clocks_after": sum(s["refused"] for s in stamps[offered:]),
        "output_beats_per_clock": round(output_beats / (outs[-1].last - outs[0].first + 1), 4),
        "result_latency_clocks": {"min": latencies[0], "median": latencies[len(latencies) // 2],
                                  "max": latencies[-1]} if latencies else None,
        "ports": per_port,
        "simulated_clocks": clocks, "wall_seconds": round(wall, 2),
        "clocks_per_second": round(clocks / wall),
        "frames_per_second": round((len(frames) + len(outs)) / wall),
    }
    with open(params["out"], "w") as out:
        json.dump(result, out)


class RtlEngine:
    """The generated Verilog as the switch of a ``netreduce.host.network.Network``: frames the network
    hands over wait in ``pending`` (with their port) for the port's AXI-Stream source; the testbench
    hands back what comes out of each port."""

    name = "rtl"

    def __init__(self, config):
        self.config = config
        self.network = None
        self.pending = collections.deque()
        self.counters = {}

    def inject(self, port, frame, now, after=0):
        self.pending.append((port, frame))


async def run_network(dut, network, send, receive, ports, time_limit_ns, poll_clocks):
    """Run ``network`` (its switch an ``RtlEngine``) on the simulated RTL in simulated time (the network's
    nanoseconds are the simulator's): each frame the network hands over goes out, in order, through
    ``await send(port, frame)``; each frame ``await receive(port)`` gives (bytes) goes back to the network.
    Until the network ends, or ``time_limit_ns`` (status "timeout"), looking every ``poll_clocks`` clocks.
    Returns ``now()``, the network's time; ``send`` and ``receive`` are no longer called."""
    engine = network.engine
    origin = get_sim_time("ns")

    def now():
        return int(get_sim_time("ns") - origin)

    async def feed():
        while True:
            while engine.pending:
                port, frame = engine.pending.popleft()
                await send(port, frame)
            await RisingEdge(dut.clk)

    async def collect(port):
        while True:
            frame = await receive(port)
            network.advance(now())
            network.from_switch(port, frame)

    network.start()
    tasks = [cocotb.start_soon(feed())] + [cocotb.start_soon(collect(port)) for port in range(ports)]
    while network.advance(now()) is None:
        if now() > time_limit_ns:
            network.status = "timeout"
            break
        await ClockCycles(dut.clk, poll_clocks)
    for task in tasks:          # the ports are the caller's again
        task.cancel()
    return now


def results_match(network, jobs, inputs):
    """The network ended and every worker of every job holds the exact tree sum of its job's inputs."""
    import numpy as np

    from netreduce.host.network import expected_sum
    return bool(network.status == "done" and all(
        np.array_equal(w.result, expected_sum(job, inputs[job.job])) for job in jobs
        for w in network.workers if w.job is job))


@cocotb.test()
async def closed_loop(dut):
    """``netreduce simulate --engine rtl``: the emulated workers run an all-reduce through the RTL in
    simulated time (the network's nanoseconds are the simulator's). Writes the summary as JSON to
    ``out``, with ``dump`` every worker's input and result to an ``.npz``, with ``pcap`` every frame on
    every host link to a pcapng file."""
    import json

    from netreduce.host.faults import FaultSpec
    from netreduce.host.network import build_allreduce, lossy_report, lossy_results_match

    params = cocotb_params()
    lossy = params.get("lossy")         # the bounded-loss class: traffic_class, deadline_us, loss_bound, rescale
    spec = FaultSpec(loss=params.get("loss", 0.0), duplicate=params.get("dup", 0.0),
                     reorder=params.get("reorder", 0.0), corrupt=params.get("corrupt", 0.0))
    inputs = None
    if params.get("inputs"):
        with open(params["inputs"], "rb") as file:
            inputs = pickle.load(file)
    network, jobs, inputs = build_allreduce(
        workers=params["job_workers"], nbytes=params["bytes"], mtu=params["mtu"], dtype=params["dtype"],
        jobs=params["job_count"], message_packets=params["message_packets"],
        message_slots=params["message_slots"], seed=params.get("seed", 0), inputs=inputs, faults_up=spec,
        faults_down=spec, width=params["width"], ports=params["ports"], engine=RtlEngine,
        start_psn=params.get("start_psn"), start_msg=params.get("start_msg", 0), pcap=params.get("pcap"),
        **(lossy or {}))
    engine = network.engine
    tb = TB(dut, params)
    await tb.reset()
    await tb.configure(network.switch_config, params["workers"])

    async def receive(port):
        return frame_bytes(await tb.sinks[port].recv())

    now = await run_network(dut, network, lambda port, frame: tb.sources[port].send(frame), receive, tb.ports,
                            params.get("time_limit_ns", 10**9), poll_clocks=4)
    engine.counters.update(await tb.registers.counters())
    summary = network.summary()
    network.close()
    if lossy:
        summary.update(match=network.status == "done" and lossy_results_match(network, inputs))
        summary["lossy"] = lossy_report(network, inputs, summary, lossy)
    else:
        summary.update(match=results_match(network, jobs, inputs))
    summary.update(clocks=int(now() / CLOCK_NS))
    with open(params["out"], "w") as out:
        json.dump(summary, out)
    if params.get("dump"):
        with open(params["dump"], "wb") as file:
            pickle.dump({(w.job.job, w.index): (inputs[w.job.job][w.index], w.result,
                                                *([w.contributors] if lossy else [])) for w in network.workers},
                        file)


@cocotb.test()
async def simulation_speed(dut):
    """Not a check but a measurement (benchmarks/bench_sim.py): the scenario replayed and checked frame
    for frame, in bulk through the harness (``mode`` "bulk") or clock by clock through cocotbext-axi
    (``mode`` "clock", with the same idle and backpressure probabilities); writes the simulated clocks
    and the wall time of the replay as JSON to ``out``."""
    import json
    import time

    params = cocotb_params()
    with open(params["scenario"], "rb") as file:
        scenario = pickle.load(file)
    if params["mode"] == "bulk":
        replay = Replay(dut, params, scenario)
        await replay.start()
        start, wall = replay.bench.cycle, time.perf_counter()
        got = await replay.play()
        wall, clocks = time.perf_counter() - wall, replay.bench.cycle - start
    else:
        tb = TB(dut, params)
        await tb.reset()
        await tb.configure(scenario["config"], params["workers"])
        start, wall = get_sim_time("ns"), time.perf_counter()
        got = await tb.replay_and_check(scenario)
        wall, clocks = time.perf_counter() - wall, round((get_sim_time("ns") - start) / CLOCK_NS)
    for p, expected in enumerate([[frame for produced in scenario["outputs"] for port, frame in produced
                                   if port == q] for q in range(params.get("ports", 1))]):
        check_port(got[p], expected, params.get("egress_queues", 4))
    frames = len(scenario["inputs"]) + sum(map(len, got))
    with open(params["out"], "w") as out:
        json.dump({"clocks": clocks, "frames": frames, "wall_seconds": wall}, out)
