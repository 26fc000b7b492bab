"""amaranth.sim unit tests of netreduce.hw.egress.EgressQueues, MLT's egress stage.

Every run drives the RTL and the model of docs/ARCHITECTURE.md, "Egress stage (MLT)"
(netreduce.sim.egress_model.EgressModel) in lockstep from one source and one ready pattern, and compares them
clock for clock: ``i.ready``, every beat on ``o``, and at the end every counter. Beside the model, each run
checks what needs no model: every frame on ``o`` is a whole frame that was offered, a queue's frames leave in
the order they came, ``o.valid`` never falls inside a frame, nothing that may not be dropped is lost, and the
buffer ends empty.

Then the behaviour the issue asks for, measured: line rate both ways, a full buffer, every queue at once,
strict priority (overtaking, and lower queueing delay for higher queues under load), the weighted shares,
the drop order by class under incast (front-layer and small-magnitude first, the reliable class never),
oversize frames, random runs with random parameters (hypothesis), and the parameter errors.
"""

import random
from collections import Counter, defaultdict

import pytest
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings, strategies as st

from netreduce.egress import (
    CLASSES,
    CONTROL_CLASS,
    CONTROL_DSCPS,
    DSCPS,
    LAYER_GROUPS,
    MAGNITUDE_BUCKETS,
    OTHER_CLASS,
    RELIABLE_CLASS,
    RELIABLE_DSCP,
    ClassEntry,
    Scheduling,
    default_class_table,
    default_dscp_classes,
    drop_level,
    lossy_class,
    lossy_dscp,
)
from netreduce.hw.egress import CLASS_COUNTERS, COUNTER_READ_LATENCY, ClassJoin, EgressQueues
from netreduce.sim.amaranth_streams import shared_simulator
from netreduce.sim.egress_model import EgressModel, InBeat

# --- traffic -----------------------------------------------------------------------------------------

def make_frame(fid, beats, width, rng, *, dscp=0, lossy=False):
    """A frame of ``beats`` beats whose words carry its id and beat index; the last beat has a random
    ``keep`` (a one-beat frame may be empty: ``keep`` 0)."""
    nbytes = width // 8
    frame = []
    for k in range(beats):
        last = k == beats - 1
        size = rng.randint(0 if beats == 1 else 1, nbytes) if last else nbytes
        data = (rng.getrandbits(width - 32) << 32) | (fid << 8) | k
        frame.append(InBeat(data, (1 << size) - 1, last, dscp, lossy))
    return frame


def frame_id(beat):
    return (beat.data & 0xFFFFFFFF) >> 8


class Source:
    """Offers frames on ``i``: frame ``n`` not before clock ``at[n]``, and before each beat an idle clock
    with probability ``idle`` (drawn again after each idle clock). A beat once offered stays offered
    until taken."""

    def __init__(self, frames, *, idle=0.0, seed=0, at=None):
        self.frames = frames
        self.at = at or [0] * len(frames)
        self.rng = random.Random(seed)
        self.idle = idle
        self.frame, self.beat = 0, 0
        self.offered_at = {}            # frame id -> clock its first beat was taken
        self.resting = self._rest()

    def _rest(self):
        return self.idle > 0 and self.rng.random() < self.idle

    @property
    def done(self):
        return self.frame == len(self.frames)

    def offer(self, clock):
        if self.done or self.resting or clock < self.at[self.frame]:
            return None
        return self.frames[self.frame][self.beat]

    def advance(self, clock, offered, taken):
        if self.done or clock < self.at[self.frame]:
            return
        if offered is None:
            self.resting = self._rest()
            return
        if not taken:
            return
        if self.beat == 0:
            self.offered_at[frame_id(offered)] = clock
        self.beat += 1
        if self.beat == len(self.frames[self.frame]):
            self.frame, self.beat = self.frame + 1, 0
        self.resting = self._rest()


def random_ready(backpressure, seed):
    rng = random.Random(seed)
    return lambda clock: rng.random() >= backpressure


# --- one run: RTL and model in lockstep ------------------------------------------------------------------

class Run:
    """The RTL ``EgressQueues(width, **params)`` and the model with the same parameters and configuration,
    fed by ``source`` while ``o.ready`` follows ``ready(clock)``, compared clock for clock."""

    def __init__(self, width=64, *, config=None, **params):
        self.width, self.params = width, params
        self._design = (("EgressQueues", width, tuple(sorted(params.items()))), lambda: EgressQueues(width, **params))
        self.dut, _ = shared_simulator(*self._design)
        self.config = dict(config or {})
        model_params = {k: v for k, v in params.items() if k != "weighted"}
        self.model = EgressModel(width, **model_params, **self.config)
        self.out_frames = []            # (clock of the first beat, clock of the last beat, [OutBeat])
        self.i_ready_low = 0
        self.counters = {}

    def _configure(self, ctx):
        dut, config = self.dut, self.config
        if "dscp_class" in config:
            ctx.set(dut.dscp_class, list(config["dscp_class"]))
        if "class_table" in config:
            ctx.set(dut.class_table, [{"queue": e.queue, "droppable": int(e.droppable), "threshold": e.threshold}
                                      for e in config["class_table"]])
        if "scheduling" in config:
            ctx.set(dut.scheduling, config["scheduling"])
        if "quantum" in config:
            ctx.set(dut.quantum, list(config["quantum"]))

    def run(self, source, ready, *, max_clocks=20000, drain=12):
        dut, model = self.dut, self.model
        self.source = source

        async def bench(ctx):
            self._configure(ctx)
            current, inside, idle_clocks = None, None, 0
            for clock in range(max_clocks):
                offer = source.offer(clock)
                if offer is not None:
                    if offer is not current:        # ``first`` is not read (the stage follows ``last``): 0
                        ctx.set(dut.i.payload, {"data": offer.data, "keep": offer.keep, "first": 0,
                                                "last": offer.last, "dscp": offer.dscp, "lossy": offer.lossy})
                    ctx.set(dut.i.valid, 1)
                else:
                    ctx.set(dut.i.valid, 0)
                current = offer
                o_ready = ready(clock)
                ctx.set(dut.o.ready, o_ready)

                i_ready = bool(ctx.get(dut.i.ready))
                assert i_ready == model.i_ready, f"clock {clock}: i.ready {i_ready}, model {model.i_ready}"
                self.i_ready_low += not i_ready
                expected = model.o_beat
                if ctx.get(dut.o.valid):
                    p = dut.o.payload
                    beat = (ctx.get(p.data), ctx.get(p.keep), bool(ctx.get(p.first)), bool(ctx.get(p.last)))
                    assert expected is not None, f"clock {clock}: o.valid, the model has no beat"
                    assert beat == (expected.data, expected.keep, expected.first, expected.last), \
                        f"clock {clock}: o {beat}, model {expected}"
                    if o_ready:
                        if beat[2]:
                            assert inside is None, f"clock {clock}: a frame starts inside another"
                            inside = (clock, [])
                        assert inside is not None, f"clock {clock}: a beat outside a frame"
                        inside[1].append(expected)
                        if beat[3]:
                            self.out_frames.append((inside[0], clock, inside[1]))
                            inside = None
                else:
                    assert expected is None, f"clock {clock}: the model has {expected}, o.valid is low"
                    assert inside is None, f"clock {clock}: o.valid fell inside a frame"
                model.tick(offer, o_ready)
                source.advance(clock, offer, offer is not None and i_ready)
                await ctx.tick()
                idle_clocks = idle_clocks + 1 if source.done and self._model_empty() else 0
                if idle_clocks == drain:
                    break
            else:
                raise AssertionError(f"not done after {max_clocks} clocks")
            self.clocks = clock + 1
            for n, name in enumerate(CLASS_COUNTERS):
                self.counters[name] = []
                for c in range(CLASSES):
                    ctx.set(dut.counter_read, n * CLASSES + c)
                    await ctx.tick().repeat(COUNTER_READ_LATENCY)
                    self.counters[name].append(ctx.get(dut.counter_value))
            self.counters["drops_oversize"] = ctx.get(dut.drops_oversize)
            self.counters["high_water"] = [ctx.get(dut.high_water[q]) for q in range(dut.queues)]
            self.counters["occupancy"] = ctx.get(dut.occupancy)

        _, sim = shared_simulator(*self._design)       # reset here: another Run may have used it since
        sim.add_testbench(bench)
        sim.run()
        self._check()
        return self

    def _model_empty(self):
        m = self.model
        return (m.stage1 is None and m.stage2 is None and m.writing is None and m.reading is None
                and not m.out and not any(m.queued))

    def _check(self):
        """The counters against the model, and what holds without a model."""
        m = self.model
        for name in ("drops_threshold", "drops_full", "frames_out", "bytes_out", "high_water"):
            assert self.counters[name] == getattr(m, name), f"{name}: {self.counters[name]}, model {getattr(m, name)}"
        assert self.counters["drops_oversize"] == m.drops_oversize
        assert self.counters["occupancy"] == 0 and m.free_cells == m.cells

        offered = {frame_id(f[0]): f for f in self.source.frames}
        assert len(offered) == len(self.source.frames)
        seen = set()
        for _, _, beats in self.out_frames:
            fid = frame_id(beats[0])
            assert fid in offered and fid not in seen, f"frame {fid} was not offered or left twice"
            seen.add(fid)
            assert [(b.data, b.keep) for b in beats] == [(b.data, b.keep) for b in offered[fid]], \
                f"frame {fid} is not whole"
        self.delivered = seen
        # each queue's frames leave in the order they came
        order = defaultdict(list)
        for _, _, beats in self.out_frames:
            order[self.queue_of(offered[frame_id(beats[0])][0])].append(frame_id(beats[0]))
        for fids in order.values():
            assert fids == sorted(fids, key=lambda f: self.source.offered_at[f])
        # a frame that may not be dropped is never lost
        for fid, frame in offered.items():
            if not self.droppable(frame[0]) and len(frame) <= m.max_frame_beats:
                assert fid in seen, f"frame {fid} (not droppable) was lost"

    def class_of(self, beat):
        cls = self.model.dscp_class[beat.dscp]
        return cls if cls < CLASSES else OTHER_CLASS

    def queue_of(self, beat):
        return min(self.model.class_table[self.class_of(beat)].queue, self.dut.queues - 1)

    def droppable(self, beat):
        return beat.lossy and self.model.class_table[self.class_of(beat)].droppable

    def chosen_before(self, clock):
        """The frames (ids) the scheduler chose before ``clock``."""
        return [frame_id(InBeat(data, 0, False)) for when, _, data in self.model.chosen if when < clock]

    def delay(self, fid):
        """Clocks from a frame's first beat taken from ``i`` to its first beat taken from ``o``."""
        first = {frame_id(beats[0]): start for start, _, beats in self.out_frames}
        return first[fid] - self.source.offered_at[fid]


# --- edge cases --------------------------------------------------------------------------------------

SMALL = dict(depth_beats=64, max_frame=64, cell_beats=2)       # 8 beats a frame at most, 32 cells


def test_single_frame_and_its_latency():
    rng = random.Random(1)
    frame = make_frame(0, 3, 64, rng)
    run = Run(**SMALL).run(Source([frame]), lambda clock: True)
    [(start, end, beats)] = run.out_frames
    # taken at 0..2; its last beat is written at 4, chosen at 7, read at 8..10, on o 3 clocks after its read
    assert (start, end) == (11, 13)
    assert run.counters["frames_out"][OTHER_CLASS] == 1
    assert run.counters["bytes_out"][OTHER_CLASS] == 16 + bin(frame[-1].keep).count("1")
    assert run.counters["high_water"] == [0, 0, 0, 3]


def test_empty_frame():
    run = Run(**SMALL).run(Source([[InBeat(0, 0, True)]]), lambda clock: True)
    assert [b.keep for b in run.out_frames[0][2]] == [0]
    assert run.counters["frames_out"][OTHER_CLASS] == 1 and run.counters["bytes_out"][OTHER_CLASS] == 0


@pytest.mark.parametrize("queues_used", [1, 4])
def test_one_beat_frames_back_to_back_at_line_rate(queues_used):
    """A one-beat frame every clock in and out: ``i`` never waits and ``o`` never idles once started."""
    rng = random.Random(queues_used)
    dscps = [RELIABLE_DSCP, lossy_dscp(1, 3), lossy_dscp(3, 3), 0][:queues_used]
    frames = [make_frame(n, 1, 64, rng, dscp=dscps[n % queues_used]) for n in range(300)]
    run = Run(**SMALL).run(Source(frames), lambda clock: True)
    assert run.i_ready_low == 0
    assert len(run.out_frames) == 300
    starts = [start for start, _, _ in run.out_frames]
    assert starts == list(range(starts[0], starts[0] + 300))


def test_long_frames_back_to_back_at_line_rate():
    rng = random.Random(2)
    frames = [make_frame(n, rng.randint(1, 8), 64, rng) for n in range(120)]
    run = Run(**SMALL).run(Source(frames), lambda clock: True)
    assert run.i_ready_low == 0
    beats = sum(map(len, frames))
    first, last = run.out_frames[0][0], run.out_frames[-1][1]
    # store and forward: a frame longer than the one before it is not whole yet when that one has left,
    # so ``o`` idles, but never more in all than a largest frame (8 beats) behind ``i``
    assert beats <= last - first + 1 < beats + 8


@pytest.mark.parametrize("cell_beats", [2, 4, 8])
@pytest.mark.parametrize("backpressure", [0.0, 0.5])
def test_frames_of_many_cells_in_a_small_buffer(cell_beats, backpressure):
    """Frames of up to five cells from every queue through a buffer of six largest frames' cells, so that a cell
    given back is soon written again: the reader follows each frame's links (read a cell ahead) at every cell
    size, with ``o`` taking every clock or at random (the reader then pauses inside cells)."""
    rng = random.Random(cell_beats * 10 + int(backpressure * 10))
    max_beats = 5 * cell_beats
    dscps = [RELIABLE_DSCP, lossy_dscp(1, 3), lossy_dscp(3, 3), 0]
    frames = [make_frame(n, rng.randint(1, max_beats), 64, rng, dscp=rng.choice(dscps)) for n in range(80)]
    run = Run(depth_beats=6 * max_beats, max_frame=max_beats * 8, cell_beats=cell_beats)
    run.run(Source(frames, idle=0.1, seed=cell_beats), random_ready(backpressure, cell_beats), max_clocks=40000)
    assert len(run.delivered) == 80


@pytest.mark.parametrize("width", [64, 512])
def test_full_buffer_waits_and_loses_nothing(width):
    """Frames that may not be dropped, with ``o`` stalled: the buffer fills until a largest frame no longer
    fits, then ``i`` waits; when ``o`` takes again, every frame leaves in order."""
    rng = random.Random(width)
    frames = [make_frame(n, rng.randint(1, 8), width, rng, dscp=RELIABLE_DSCP) for n in range(60)]
    run = Run(width, depth_beats=64, max_frame=8 * width // 8, cell_beats=2)
    run.run(Source(frames), lambda clock: clock >= 400)
    assert run.i_ready_low > 300
    assert run.counters["high_water"][0] > 40                  # filled but for a largest frame
    assert len(run.delivered) == 60 and sum(run.counters["drops_full"]) == 0


def test_full_buffer_drops_droppable_frames():
    """Droppable frames whose threshold is never reached: once a largest frame would not fit, they are
    dropped whole (FULL), and the stream is never held."""
    rng = random.Random(3)
    frames = [make_frame(n, rng.randint(1, 8), 64, rng, dscp=lossy_dscp(3, 3), lossy=True) for n in range(80)]
    table = list(default_class_table(4, 64, 8))
    table[lossy_class(3, 3)] = ClassEntry(2, True, 64)
    run = Run(**SMALL, config={"class_table": table}).run(Source(frames), lambda clock: clock >= 500)
    assert run.i_ready_low == 0
    dropped = run.counters["drops_full"][lossy_class(3, 3)]
    assert dropped > 40 and len(run.delivered) + dropped == 80
    assert sum(run.counters["drops_threshold"]) == 0


def test_every_queue_at_once():
    """Frames for all 8 queues wait while ``o`` is stalled; then they leave queue by queue (strict
    priority), each queue in order."""
    rng = random.Random(4)
    dscp_class = [n % 8 for n in range(DSCPS)]
    table = [ClassEntry(c, False, 256) for c in range(8)] + [ClassEntry(7, False, 256)] * (CLASSES - 8)
    frames = [make_frame(n, rng.randint(1, 4), 64, rng, dscp=rng.randrange(8)) for n in range(60)]
    run = Run(queues=8, depth_beats=256, max_frame=32, cell_beats=2,
              config={"dscp_class": dscp_class, "class_table": table})
    run.run(Source(frames), lambda clock: clock >= 300)
    assert run.i_ready_low == 0
    ahead = run.chosen_before(300)              # chosen while ``o`` was stalled: as much as 4 beats hold
    assert 1 <= len(ahead) <= 5
    order = [frame_id(beats[0]) for _, _, beats in run.out_frames]
    assert order[:len(ahead)] == ahead
    queues = [frames[fid][0].dscp for fid in order[len(ahead):]]
    assert queues == sorted(queues)
    assert all(run.counters["high_water"])


# --- scheduling --------------------------------------------------------------------------------------

def test_high_priority_frame_overtakes_queued_frames():
    rng = random.Random(5)
    low = [make_frame(n, 4, 64, rng, dscp=0) for n in range(10)]
    high = make_frame(10, 2, 64, rng, dscp=RELIABLE_DSCP)
    run = Run(**SMALL).run(Source(low + [high], at=[0] * 10 + [100]), lambda clock: clock >= 150)
    order = [frame_id(beats[0]) for _, _, beats in run.out_frames]
    # behind the frames the reader had already chosen (one in the output FIFO, one waiting), before the rest
    ahead = run.chosen_before(100)
    assert ahead == [0, 1] and order[:3] == [0, 1, 10]


def test_high_queues_see_lower_queueing_delay():
    """Random frames of the four queues, a quarter each, offered at about 95% of what ``o`` takes (ready
    half the time): the mean delay from ``i`` to ``o`` grows from the highest queue to the lowest. Queues 0
    and 1 differ little at this load (the frame already being sent and the fixed latency make most of
    their delay), so neighbours may tie within a clock; the lowest queue waits clearly longer (in runs of
    the model over 16 seeds, 8 clocks more at least)."""
    rng = random.Random(6)
    dscps = {0: RELIABLE_DSCP, 1: lossy_dscp(1, 3), 2: lossy_dscp(2, 3), 3: 0}
    frames = []
    for n in range(400):
        q = rng.randrange(4)
        frames.append(make_frame(n, rng.randint(1, 4), 64, rng, dscp=dscps[q]))
    run = Run(depth_beats=512, max_frame=32, cell_beats=2)
    run.run(Source(frames, idle=0.53, seed=6), random_ready(0.5, 7))
    delays = defaultdict(list)
    for fid in run.delivered:
        delays[run.queue_of(frames[fid][0])].append(run.delay(fid))
    mean = [sum(delays[q]) / len(delays[q]) for q in range(4)]
    assert all(mean[q] <= mean[q + 1] + 1 for q in range(3)), mean
    assert mean[0] < mean[2] < mean[3] and mean[3] > mean[0] + 5, mean


def test_weighted_shares():
    """Deficit round robin with quanta 8:4:2:1: while every queue has frames, each gets its share of
    beats (frames of 1 to 4 beats), and the lowest queue is served although the highest is busy."""
    rng = random.Random(8)
    dscps = [RELIABLE_DSCP, lossy_dscp(1, 3), lossy_dscp(2, 3), 0]
    frames = [make_frame(n, rng.randint(1, 4), 64, rng, dscp=dscps[n % 4]) for n in range(400)]
    config = {"scheduling": Scheduling.WEIGHTED, "quantum": [16, 8, 4, 2]}
    run = Run(depth_beats=2048, max_frame=32, cell_beats=2, config=config)
    run.run(Source(frames), lambda clock: clock >= 1100)
    queue = {fid: run.queue_of(frames[fid][0]) for fid in range(400)}
    # the window in which every queue still had frames: up to the first time a queue has sent all of its own
    totals = Counter(queue.values())
    sent, beats = Counter(), Counter()
    for n, (_, _, out) in enumerate(run.out_frames):
        q = queue[frame_id(out[0])]
        sent[q] += 1
        if n > 0:                       # the first was chosen before the others came
            beats[q] += len(out)
        if sent[q] == totals[q]:
            break
    share = [beats[q] / sum(beats.values()) for q in range(4)]
    for q, expected in enumerate([8 / 15, 4 / 15, 2 / 15, 1 / 15]):
        assert abs(share[q] - expected) < 0.02, share


def test_weighted_small_quanta():
    """Quanta below a frame's length: a queue may need rounds of replenishment (clocks with no choice)."""
    rng = random.Random(9)
    frames = [make_frame(n, rng.randint(1, 8), 64, rng, dscp=[RELIABLE_DSCP, 0][n % 2]) for n in range(60)]
    config = {"scheduling": Scheduling.WEIGHTED, "quantum": [3, 0, 1, 1]}
    Run(**SMALL, config=config).run(Source(frames, idle=0.3, seed=9), random_ready(0.3, 10))


# --- admission ----------------------------------------------------------------------------------------

def incast_frames(rng, count, width=64):
    """Frames of every bounded-loss class, of the reliable class, of DSCP 0 and of a bounded-loss DSCP
    without ``lossy``, with lengths of 1 to 8 beats."""
    frames = []
    for n in range(count):
        pick = rng.random()
        if pick < 0.8:
            g, b = rng.randrange(LAYER_GROUPS), rng.randrange(MAGNITUDE_BUCKETS)
            frames.append(make_frame(n, rng.randint(1, 8), width, rng, dscp=lossy_dscp(g, b), lossy=True))
        elif pick < 0.9:
            frames.append(make_frame(n, rng.randint(1, 8), width, rng, dscp=RELIABLE_DSCP))
        elif pick < 0.95:
            frames.append(make_frame(n, rng.randint(1, 8), width, rng, dscp=0))
        else:
            frames.append(make_frame(n, rng.randint(1, 8), width, rng, dscp=lossy_dscp(0, 0), lossy=False))
    return frames


@pytest.mark.parametrize("width", [64, 512])
def test_incast_drops_front_and_small_first(width):
    """More offered than drained (a frame offered every clock, ``o`` ready half the time): droppable
    frames are dropped by drop level, front-layer and small-magnitude first, and only they."""
    rng = random.Random(width + 1)
    frames = incast_frames(rng, 700, width)
    run = Run(width, depth_beats=256, max_frame=8 * width // 8, cell_beats=2)
    run.run(Source(frames), random_ready(0.5, width), max_clocks=30000)
    drops = [a + b for a, b in zip(run.counters["drops_threshold"], run.counters["drops_full"], strict=True)]
    offered = Counter(run.class_of(f[0]) for f in frames if f[0].lossy)
    rate = defaultdict(lambda: [0, 0])
    for g in range(LAYER_GROUPS):
        for b in range(MAGNITUDE_BUCKETS):
            c = lossy_class(g, b)
            rate[drop_level(g, b)][0] += drops[c]
            rate[drop_level(g, b)][1] += offered[c]
    rates = [rate[level][0] / rate[level][1] for level in sorted(rate)]
    assert rates[0] > 0.5 and rates[-1] < rates[0] / 2, rates
    # by level, not increasing (give or take the chance of when each frame came)
    assert all(a >= b - 0.05 for a, b in zip(rates, rates[1:], strict=False)), rates
    # front before back for equal magnitude, small before large for equal layer
    for g in range(LAYER_GROUPS):
        per_bucket = [drops[lossy_class(g, b)] / offered[lossy_class(g, b)] for b in range(MAGNITUDE_BUCKETS)]
        assert per_bucket[0] >= per_bucket[-1]
    for b in range(MAGNITUDE_BUCKETS):
        per_group = [drops[lossy_class(g, b)] / offered[lossy_class(g, b)] for g in range(LAYER_GROUPS)]
        assert per_group[0] >= per_group[-1]
    # the reliable class, DSCP 0, and a bounded-loss DSCP without ``lossy`` are never dropped: they wait
    assert drops[RELIABLE_CLASS] == drops[OTHER_CLASS] == 0
    for fid, frame in enumerate(frames):
        if not frame[0].lossy:
            assert fid in run.delivered


def test_threshold_zero_drops_a_class_and_lossy_bit_protects():
    rng = random.Random(11)
    table = list(default_class_table(4, 64, 8))
    table[lossy_class(2, 1)] = ClassEntry(1, True, 0)
    frames = [make_frame(n, 2, 64, rng, dscp=lossy_dscp(2, 1), lossy=n % 2 == 0) for n in range(20)]
    run = Run(**SMALL, config={"class_table": table}).run(Source(frames), lambda clock: True)
    assert run.counters["drops_threshold"][lossy_class(2, 1)] == 10
    assert run.delivered == set(range(1, 20, 2))


def test_oversize_frames_are_dropped_whole():
    rng = random.Random(12)
    frames = [make_frame(0, 3, 64, rng), make_frame(1, 11, 64, rng, dscp=RELIABLE_DSCP),
              make_frame(2, 8, 64, rng), make_frame(3, 9, 64, rng), make_frame(4, 1, 64, rng)]
    run = Run(**SMALL).run(Source(frames, idle=0.2, seed=3), random_ready(0.3, 4))
    assert run.delivered == {0, 2, 4}
    assert run.counters["drops_oversize"] == 2


def test_control_frames_go_first():
    """The default map: DSCP 48 and 56 are the control class, in queue 0 with the reliable class."""
    rng = random.Random(13)
    frames = [make_frame(n, 4, 64, rng, dscp=0) for n in range(6)] + \
        [make_frame(6, 1, 64, rng, dscp=CONTROL_DSCPS[0]), make_frame(7, 1, 64, rng, dscp=CONTROL_DSCPS[1])]
    run = Run(**SMALL).run(Source(frames), lambda clock: clock >= 60)
    order = [frame_id(beats[0]) for _, _, beats in run.out_frames]
    ahead = len(run.chosen_before(60))
    assert ahead == 2 and order[ahead:ahead + 2] == [6, 7]
    assert run.counters["frames_out"][CONTROL_CLASS] == 2


# --- random runs against the model -------------------------------------------------------------------

@st.composite
def scenarios(draw):
    width = draw(st.sampled_from([64, 128, 512]))
    queues = draw(st.sampled_from([1, 2, 4, 5, 8]))
    cell_beats = draw(st.sampled_from([2, 4]))
    max_frame_beats = draw(st.integers(1, 12))
    cells = draw(st.integers(max(2, -(-max_frame_beats // cell_beats)), 40))
    depth_beats = cells * cell_beats
    weighted = draw(st.booleans())
    config = {}
    if draw(st.booleans()):
        config["dscp_class"] = [draw(st.integers(0, 31)) for _ in range(DSCPS)]
    if draw(st.booleans()):
        config["class_table"] = [ClassEntry(draw(st.integers(0, (1 << max(1, (queues - 1).bit_length())) - 1)),
                                            draw(st.booleans()), draw(st.integers(0, depth_beats)))
                                 for _ in range(CLASSES)]
    if weighted:
        config["scheduling"] = draw(st.sampled_from(Scheduling))
        config["quantum"] = [draw(st.integers(0, 20)) for _ in range(queues)]
    max_frame = max_frame_beats * width // 8 - draw(st.integers(0, 3))     # bytes: the last beat may be short
    params = dict(queues=queues, depth_beats=depth_beats, max_frame=max_frame, cell_beats=cell_beats,
                  weighted=weighted)
    seed = draw(st.integers(0, 2**32 - 1))
    idle = draw(st.sampled_from([0.0, 0.1, 0.5]))
    backpressure = draw(st.sampled_from([0.0, 0.3, 0.6, 0.9]))
    return width, params, config, seed, idle, backpressure


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_runs_match_the_model(scenario):
    width, params, config, seed, idle, backpressure = scenario
    rng = random.Random(seed)
    max_frame_beats = -(-params["max_frame"] // (width // 8))
    frames = []
    for n in range(rng.randint(1, 60)):
        beats = rng.randint(1, max_frame_beats + (2 if rng.random() < 0.05 else 0))
        frames.append(make_frame(n, beats, width, rng, dscp=rng.randrange(DSCPS), lossy=rng.random() < 0.6))
    Run(width, config=config, **params).run(Source(frames, idle=idle, seed=seed), random_ready(backpressure, seed),
                                            max_clocks=20000)


# --- the default map and the parameters ----------------------------------------------------------------

def test_default_map_is_the_host_librarys():
    """The default DSCP table decodes what netreduce.host.classify marks by default: class (g, b) on its
    DSCP with drop level g + b (the lower the level, the lower the threshold), the reliable class on 26."""
    classify = pytest.importorskip("netreduce.host.classify")
    class_map = classify.ClassMap.default()
    assert (class_map.layer_groups, class_map.magnitude_buckets) == (LAYER_GROUPS, MAGNITUDE_BUCKETS)
    table, classes = default_dscp_classes(), default_class_table(4, 1024, 144)
    for dscp, decoded in enumerate(class_map.table()):
        if decoded is None:
            assert table[dscp] in (OTHER_CLASS, CONTROL_CLASS)
        elif decoded.reliable:
            assert table[dscp] == RELIABLE_CLASS
        else:
            assert table[dscp] == lossy_class(decoded.group, decoded.bucket)
            assert class_map.drop_level(decoded.group, decoded.bucket) == drop_level(decoded.group, decoded.bucket)
    thresholds = {drop_level(g, b): classes[lossy_class(g, b)].threshold
                  for g in range(LAYER_GROUPS) for b in range(MAGNITUDE_BUCKETS)}
    assert [thresholds[level] for level in sorted(thresholds)] == sorted(set(thresholds.values()))
    assert not any(classes[c].droppable for c in (RELIABLE_CLASS, CONTROL_CLASS, OTHER_CLASS))


@pytest.mark.parametrize("kwargs, message", [
    (dict(width=48), "width must be one of"),
    (dict(queues=0), "queues must be an integer from 1 to 16"),
    (dict(queues=17), "queues must be an integer from 1 to 16"),
    (dict(cell_beats=3), "cell_beats must be a power of two"),
    (dict(cell_beats=1), "cell_beats must be a power of two"),
    (dict(depth_beats=3, cell_beats=2), "depth_beats must be an integer from 4"),
    (dict(depth_beats=66, cell_beats=4), "a whole number of cells"),
    (dict(depth_beats=64, max_frame=513), r"max_frame \(513 bytes, 65 beats\) must fit in the buffer"),
    (dict(max_frame=0), r"max_frame \(bytes\) must be"),
    (dict(weighted=1), "weighted must be True or False"),
])
def test_parameter_errors(kwargs, message):
    kwargs = {"width": 64, **kwargs}
    with pytest.raises(ValueError, match=message):
        EgressQueues(kwargs.pop("width"), **kwargs)


def test_defaults_and_ports():
    dut = EgressQueues(64)
    dut._MustUse__silence = True            # built for its attributes only
    assert (dut.depth_beats, dut.cell_beats, dut.max_frame_beats, dut.cells) == (8192, 8, 1152, 1024)
    assert hasattr(dut, "scheduling") and len(dut.quantum) == 4
    dut = EgressQueues(512, queues=8, weighted=False)
    dut._MustUse__silence = True
    assert (dut.depth_beats, dut.cell_beats, dut.max_frame_beats) == (1024, 2, 144)
    assert not hasattr(dut, "scheduling") and len(dut.high_water) == 8


# --- ClassJoin: the switch's frames with their classes ---------------------------------------------

def test_class_join_gives_each_frame_its_class():
    """Frames (random lengths, idle clocks) and their classes (given late or early, one per frame) come
    out paired in order: every beat of frame n carries class n, ``first`` on its first beat only, each
    class taken once; with random backpressure, and one beat a clock when nothing waits."""
    rng = random.Random(5)
    dut = ClassJoin(64)
    frames = [[(n << 32) | rng.getrandbits(32) for _ in range(rng.randint(1, 5))] for n in range(120)]
    classes = [(rng.randrange(64), rng.randrange(2), rng.randrange(4)) for _ in frames]
    taken, clocks = [], []

    async def frames_in(ctx):
        for frame in frames:
            for index, word in enumerate(frame):
                ctx.set(dut.i.valid, 0)
                while rng.random() < 0.2:
                    await ctx.tick()
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"data": word, "keep": 0xFF, "first": 0, "last": index == len(frame) - 1})
                await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def classes_in(ctx):
        for dscp, lossy, port in classes:
            ctx.set(dut.classes.valid, 0)
            while rng.random() < 0.5:
                await ctx.tick()
            ctx.set(dut.classes.valid, 1)
            ctx.set(dut.classes.payload, {"dscp": dscp, "lossy": lossy, "port": port})
            await ctx.tick().until(dut.classes.ready)
        ctx.set(dut.classes.valid, 0)

    async def frames_out(ctx):
        clock = 0
        while True:
            ready = rng.random() >= 0.3
            ctx.set(dut.o.ready, ready)
            _, _, valid, beat = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if ready and valid:
                taken.append((beat.data, beat.first, beat.last, beat.dscp, beat.lossy, beat.port))
                clocks.append(clock)
            clock += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for bench in (frames_in, classes_in, frames_out):
        sim.add_testbench(bench)
    sim.run_until(6000e-8)
    expected = [(word, index == 0, index == len(frame) - 1, *classes[n])
                for n, frame in enumerate(frames) for index, word in enumerate(frame)]
    assert taken == expected


def test_class_join_passes_one_beat_a_clock():
    """With every frame's class waiting and ``o`` always ready, a stream of frames passes without a gap."""
    dut = ClassJoin(512)
    beats = [(n, index, count) for n, count in enumerate([1, 3, 1, 1, 2]) for index in range(count)]
    seen = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.classes.valid, 1)
        for n, index, count in beats:
            ctx.set(dut.classes.payload, {"dscp": 40 + n, "lossy": 0})
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": n, "keep": 1, "first": 0, "last": index == count - 1})
            assert ctx.get(dut.i.ready) and ctx.get(dut.o.valid)
            assert ctx.get(dut.classes.ready) == (index == 0)
            seen.append((ctx.get(dut.o.payload.dscp), ctx.get(dut.o.payload.first)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(40 + n, index == 0) for n, index, _ in beats]
