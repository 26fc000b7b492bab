"""amaranth.sim unit tests of netreduce.hw.slots.SlotMemory (contribution banks, sum engine, results).

The reference is written in Python from netreduce.sim.fp.tree_sum: contributions are kept in a numpy
array indexed like the banks, each request's sums are computed lane by lane and stored at its result
entry, and every result word read back through the read ports is compared bit for bit.

One testbench drives a run in three phases: writes (random order, random idle clocks per port, several
ports writing different workers in one clock, and clocks where two ports write one worker's bank, where
the lower-numbered port must win), sum requests (back to back or with idle clocks, with ``sum_done``
always ready, randomly not ready, or held low for a while; meanwhile the contributions of one packet slot
are written, and its requests wait for them), and reads of every result word written (several read
ports per clock, data held between reads).
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from netreduce.hw.fp import MAX_ADDER_STAGES
from netreduce.hw.slots import SlotMemory
from netreduce.sim import fp

# --- reference ---------------------------------------------------------------------------------------

def make_contributions(fmt, workers, slots, packet_beats, lanes, rng):
    """Bit patterns of shape (workers, slots, packet_beats, lanes): biased random operands (zeros,
    subnormals, infinities, NaNs) and, for some words, values of mixed signs around one exponent so
    that the tree really cancels."""
    f = fp.get_format(fmt)
    shape = (workers, slots, packet_beats, lanes)
    c = fp.random_operands(f, int(np.prod(shape)), rng).reshape(shape)
    e = rng.integers(f.bias - 3, f.bias + 3, shape)
    close = ((rng.integers(0, 2, shape) << (f.width - 1)) | (e << f.frac_bits)
             | rng.integers(0, f.frac_mask + 1, shape)).astype(f.dtype)
    near = rng.random((1, slots, packet_beats, 1)) < 0.4
    return np.where(near, close, c)


def pack_word(lane_values, ew):
    return sum(int(v) << (lane * ew) for lane, v in enumerate(lane_values))


def unpack_word(word, ew, lanes):
    return [(word >> (lane * ew)) & ((1 << ew) - 1) for lane in range(lanes)]


def ref_results(fmt, ftz, contributions, requests, packet_beats):
    """{result word address: expected lane values} after ``requests`` in order (later ones overwrite)."""
    workers = contributions.shape[0]
    expected = {}
    for slot, result_slot, beats, mask in requests:
        present = np.array([(mask >> w) & 1 for w in range(workers)], dtype=bool)
        for beat in range(beats):
            lanes = fp.tree_sum(fmt, contributions[:, slot, beat, :], present, ftz)
            expected[result_slot * packet_beats + beat] = [int(v) for v in lanes]
    return expected


def random_requests(rng, workers, slots, packet_beats, count):
    """``count`` requests ``(slot, result_slot, beats, mask)``: random masks plus a single worker, all
    workers and none; beat counts biased towards 1 and ``packet_beats``."""
    full = (1 << workers) - 1
    masks = [full, 1 << int(rng.integers(workers)), 0]
    masks += [int(rng.integers(0, full + 1)) for _ in range(count - len(masks))]
    rng.shuffle(masks)
    requests = []
    for mask in masks[:count]:
        pick = rng.random()
        beats = 1 if pick < 0.25 else packet_beats if pick < 0.5 else int(rng.integers(1, packet_beats + 1))
        requests.append((int(rng.integers(slots)), int(rng.integers(2 * slots)), beats, mask))
    return requests


def set_members(ctx, interface, **values):
    for name, value in values.items():
        ctx.set(getattr(interface, name), value)


# --- the testbench -----------------------------------------------------------------------------------

class Run:
    """What a simulation observed: clocks of the request handshakes and of the ``sum_done`` transfers,
    the ``result_slot`` of each ``sum_done``, result words read, and write-port statistics."""

    def __init__(self):
        self.accepted, self.done_cycles, self.done_slots = [], [], []
        self.read_words = {}
        self.parallel_write_clocks = 0
        self.request_phase_start = None
        self.held_accepts = 0
        self.writes_during_sums = 0         # clocks with a write while a request was in flight


def simulate(dut, contributions, requests, *, seed=0, write_idle=0.3, request_idle=0.0,
             done_backpressure=0.0, hold=None, read_idle=0.2, collisions=0, late_slots=()):
    """Run the three phases on ``dut``; ``hold = (first, last)`` holds ``sum_done.ready`` low from
    clock ``first`` to ``last`` of the request phase; ``collisions`` clocks where port 1 writes the same
    worker as port 0 (port 1 must lose). The packet slots in ``late_slots`` first get stale words and
    their real contributions only during the request phase, while the engine sums other slots; a
    request for such a slot waits until its words are written."""
    rng = np.random.default_rng(seed)
    ew = dut.fmt.width
    pb = dut.packet_beats
    run = Run()
    workers = dut.workers
    pending = [(w, s, b) for w in range(workers) for s in range(dut.slots) for b in range(pb)]
    rng.shuffle(pending)
    late_writes = [(w, s, b) for w, s, b in pending if s in late_slots]
    stale = fp.random_operands(dut.fmt, contributions.size, rng).reshape(contributions.shape)

    def set_write(ctx, port, worker, slot, beat, word, valid):
        ctx.set(port.valid, valid)
        ctx.set(port.worker, worker)
        ctx.set(port.slot, slot)
        ctx.set(port.beat, beat)
        ctx.set(port.data, word)

    def drive_writes(ctx, pending_writes, values):
        """Set the write ports for one clock from ``pending_writes`` (taken words are removed)."""
        used = set()
        for port in dut.write:
            choice = None
            if pending_writes and rng.random() >= write_idle:
                choice = next((k for k, (w, _, _) in enumerate(pending_writes) if w not in used), None)
            if choice is None:          # idle: garbage on the other members, which must be ignored
                set_write(ctx, port, int(rng.integers(workers)), int(rng.integers(dut.slots)),
                          int(rng.integers(pb)), int(rng.integers(1 << 62)), 0)
                continue
            w, s, b = pending_writes.pop(choice)
            used.add(w)
            set_write(ctx, port, w, s, b, pack_word(values[w, s, b], ew), 1)
        run.parallel_write_clocks += len(used) >= 2
        return len(used)

    async def testbench(ctx):
        # phase 1: writes
        pending_writes = list(pending)
        is_late = np.isin(np.arange(dut.slots), late_slots)[None, :, None, None]
        first_values = np.where(is_late, stale, contributions)
        while pending_writes:
            drive_writes(ctx, pending_writes, first_values)
            await ctx.tick()
        for _ in range(collisions):
            w, s, b = (int(rng.integers(workers)), int(rng.integers(dut.slots)), int(rng.integers(pb)))
            set_write(ctx, dut.write[0], w, s, b, pack_word(contributions[w, s, b], ew), 1)
            other = (s * pb + b + 1) % (dut.slots * pb)
            set_write(ctx, dut.write[1], w, other // pb, other % pb, int(rng.integers(1 << 62)), 1)
            await ctx.tick()
        for port in dut.write:
            ctx.set(port.valid, 0)

        # phase 2: sum requests and done tokens, one loop per clock
        next_request = 0
        cycle = 0
        while len(run.done_slots) < len(requests):
            assert cycle < 40 * len(requests) + 400, "the sum engine stopped"
            if drive_writes(ctx, late_writes, contributions) and len(run.accepted) > len(run.done_slots):
                run.writes_during_sums += 1
            waiting = {s for _, s, _ in late_writes}     # words written in the handshake clock count
            offer = (next_request < len(requests) and requests[next_request][0] not in waiting
                     and rng.random() >= request_idle)
            ctx.set(dut.sum_request.valid, offer)
            if offer:
                slot, result_slot, beats, mask = requests[next_request]
                ctx.set(dut.sum_request.payload, {"slot": slot, "result_slot": result_slot, "beats": beats,
                                                  "mask": mask})
            holding = hold is not None and hold[0] <= cycle < hold[1]
            ready = not holding and rng.random() >= done_backpressure
            ctx.set(dut.sum_done.ready, ready)
            if offer and ctx.get(dut.sum_request.ready):
                run.accepted.append(cycle)
                run.held_accepts += holding
                next_request += 1
            if ready and ctx.get(dut.sum_done.valid):
                run.done_cycles.append(cycle)
                run.done_slots.append(ctx.get(dut.sum_done.payload.result_slot))
            await ctx.tick()
            cycle += 1
        ctx.set(dut.sum_request.valid, 0)
        ctx.set(dut.sum_done.ready, 0)
        for port in dut.write:
            ctx.set(port.valid, 0)
        for _ in range(3):
            await ctx.tick()
            assert not ctx.get(dut.sum_done.valid), "a sum_done more than requested"

        # phase 3: read every result word written, several ports per clock
        addresses = sorted({rs * pb + b for _, rs, beats, _ in requests for b in range(min(max(beats, 1), pb))})
        rng.shuffle(addresses)
        last = [None] * dut.read_ports       # (address, data) of each port's previous read
        issued = [None] * dut.read_ports
        while addresses or any(a is not None for a in issued):
            for p, port in enumerate(dut.read):
                if issued[p] is not None:       # the word of the clock-before's en is on data now
                    word = ctx.get(port.data)
                    run.read_words.setdefault(issued[p], []).append(word)
                    last[p] = (issued[p], word)
                elif last[p] is not None:       # no en: data holds
                    assert ctx.get(port.data) == last[p][1], f"read port {p} did not hold its data"
                issued[p] = None
                if addresses and rng.random() >= read_idle:
                    address = addresses.pop()
                    ctx.set(port.en, 1)
                    ctx.set(port.result_slot, address // pb)
                    ctx.set(port.beat, address % pb)
                    issued[p] = address
                else:
                    ctx.set(port.en, 0)
                    ctx.set(port.result_slot, int(rng.integers(2 * dut.slots)))
                    ctx.set(port.beat, int(rng.integers(pb)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return run


def check_results(dut, contributions, requests, run):
    expected = ref_results(dut.fmt, dut.ftz, contributions, requests, dut.packet_beats)
    ew, lanes = dut.fmt.width, dut.lanes
    assert set(run.read_words) == set(expected)
    bad = []
    for address, want in sorted(expected.items()):
        for word in run.read_words[address]:
            got = unpack_word(word, ew, lanes)
            if got != want:
                bad.append(f"result slot {address // dut.packet_beats} beat {address % dut.packet_beats}: "
                           f"RTL {[hex(v) for v in got]}, expected {[hex(v) for v in want]}")
    assert not bad, "\n".join(bad[:8])
    assert run.done_slots == [rs for _, rs, _, _ in requests], "sum_done order differs from request order"


def run_case(*, fmt, ftz, workers, width=64, slots=3, packet_beats=4, write_ports=1, read_ports=1,
             adder_stages=2, count=10, seed=0, **knobs):
    dut = SlotMemory(width=width, workers=workers, slots=slots, packet_beats=packet_beats, fmt=fmt, ftz=ftz,
                     write_ports=write_ports, read_ports=read_ports, adder_stages=adder_stages)
    rng = np.random.default_rng(seed)
    contributions = make_contributions(fmt, workers, slots, packet_beats, dut.lanes, rng)
    requests = random_requests(rng, workers, slots, packet_beats, count)
    late = knobs.get("late_slots", ())
    early = [k for k, r in enumerate(requests) if r[0] not in late]
    if late and early:                  # start with slots that are written: the engine runs while the
        requests.insert(0, requests.pop(early[0]))      # late slots are written
    run = simulate(dut, contributions, requests, seed=seed, **knobs)
    check_results(dut, contributions, requests, run)
    return dut, requests, run


# --- tests -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, ftz, workers, write_ports, read_ports", [
    ("fp32", False, 8, 2, 2),
    ("bf16", True, 8, 2, 1),
    ("fp16", False, 3, 2, 3),
    ("fp16", True, 8, 1, 2),
    ("bf16", False, 1, 2, 1),
    ("fp32", True, 3, 1, 1),
])
def test_sums(fmt, ftz, workers, write_ports, read_ports):
    """Random contributions and requests in every format, FTZ on and off, 1, 3 and 8 workers; idle
    clocks between writes and requests, a sum_done that is randomly not ready, and packet slot 1
    written while the engine sums the others."""
    _, _, run = run_case(fmt=fmt, ftz=ftz, workers=workers, write_ports=write_ports, read_ports=read_ports,
                         request_idle=0.2, done_backpressure=0.3, seed=workers + 10 * write_ports,
                         collisions=3 if write_ports > 1 else 0, late_slots=(1,))
    if write_ports > 1 and workers > 1:
        assert run.parallel_write_clocks > 0, "no clock with two ports writing"
    assert run.writes_during_sums > 0, "no write while the engine was summing"


def test_wide_non_power_of_two():
    """A 128-bit word (4 binary32 lanes, 8 fp16 lanes), packet_beats and slots not powers of two."""
    run_case(fmt="fp32", ftz=False, workers=3, width=128, slots=3, packet_beats=3, write_ports=2,
             read_ports=2, seed=5)
    run_case(fmt="fp16", ftz=True, workers=3, width=128, slots=2, packet_beats=5, count=6, seed=6)


def test_512_bit_datapath():
    """The 512-bit datapath: 32 bfloat16 lanes."""
    run_case(fmt="bf16", ftz=True, workers=3, width=512, slots=2, packet_beats=3, count=6, seed=7)


def test_back_to_back_one_beat_per_clock():
    """Default depths (latency 21): requests back to back, sum_done always ready. Request i is taken
    in the clock of request i-1's last read, its done comes latency + beats - 1 clocks after its
    handshake, so the last done is sum(beats) + latency - 1 clocks after the first handshake: from the
    first handshake's clock to the last done's clock, both included, sum(beats) + latency clocks."""
    dut, requests, run = run_case(fmt="fp32", ftz=False, workers=8, slots=4, packet_beats=4,
                                  adder_stages=5, count=14, seed=3)
    assert dut.latency == 1 + 3 * 5 + 1 + 4 == 21
    beats = [b for _, _, b, _ in requests]
    t0 = run.accepted[0]
    assert run.accepted == [t0 + sum(beats[:i]) for i in range(len(beats))]
    assert run.done_cycles == [t0 + sum(beats[:i + 1]) + dut.latency - 1 for i in range(len(beats))]
    assert run.done_cycles[-1] - t0 == sum(beats) + dut.latency - 1


def test_one_beat_requests_at_full_rate():
    """Enough done tokens for one-beat requests every clock (the worst case for the token count)."""
    dut = SlotMemory(width=32, workers=2, slots=2, packet_beats=2, adder_stages=3)
    rng = np.random.default_rng(8)
    contributions = make_contributions("fp32", 2, 2, 2, dut.lanes, rng)
    requests = [(int(rng.integers(2)), int(rng.integers(4)), 1, int(rng.integers(4))) for _ in range(40)]
    run = simulate(dut, contributions, requests, seed=8)
    check_results(dut, contributions, requests, run)
    t0 = run.accepted[0]
    assert run.accepted == list(range(t0, t0 + 40))
    assert run.done_cycles == list(range(t0 + dut.latency, t0 + dut.latency + 40))


def test_sum_done_held_low():
    """sum_done not ready for 120 clocks: requests stop once every done token is taken, nothing is lost,
    the order holds, and the requests resume when sum_done is taken again."""
    dut = SlotMemory(width=64, workers=3, slots=2, packet_beats=2, fmt="bf16", adder_stages=2)
    rng = np.random.default_rng(9)
    contributions = make_contributions("bf16", 3, 2, 2, dut.lanes, rng)
    requests = [(int(rng.integers(2)), int(rng.integers(4)), int(rng.integers(1, 3)), int(rng.integers(8)))
                for _ in range(30)]
    run = simulate(dut, contributions, requests, seed=9, hold=(5, 125))
    check_results(dut, contributions, requests, run)
    accepted_by_hold_end = sum(1 for c in run.accepted if c < 125)
    assert accepted_by_hold_end == dut.done_depth, "requests did not stop at the done-token count"
    assert all(c >= 125 for c in run.done_cycles)
    assert run.held_accepts > 0


def test_read_at_done():
    """A read issued in the clock of a sum_done handshake returns that request's sum, even when the next
    request writes the same word in that very clock (the read ports are not transparent)."""
    dut = SlotMemory(width=64, workers=3, slots=2, packet_beats=2, adder_stages=2)
    rng = np.random.default_rng(12)
    contributions = make_contributions("fp32", 3, 2, 2, dut.lanes, rng)
    requests = [(0, 3, 1, 0b111), (1, 3, 1, 0b101), (0, 3, 2, 0b010)]
    expected = [ref_results("fp32", False, contributions, [r], 2)[6] for r in requests]
    seen = []

    async def testbench(ctx):
        for w in range(3):
            for s in range(2):
                for b in range(2):
                    set_members(ctx, dut.write[0], valid=1, worker=w, slot=s, beat=b,
                                data=pack_word(contributions[w, s, b], 32))
                    await ctx.tick()
        ctx.set(dut.write[0].valid, 0)
        ctx.set(dut.sum_done.ready, 1)
        pending, reading, done = list(requests), False, 0
        for _ in range(60):
            ctx.set(dut.sum_request.valid, bool(pending))
            if pending:
                slot, result_slot, beats, mask = pending[0]
                ctx.set(dut.sum_request.payload, {"slot": slot, "result_slot": result_slot, "beats": beats,
                                                  "mask": mask})
                if ctx.get(dut.sum_request.ready):
                    pending.pop(0)
            if reading:
                seen.append(unpack_word(ctx.get(dut.read[0].data), 32, 2))
            reading = ctx.get(dut.sum_done.valid)
            done += reading
            set_members(ctx, dut.read[0], en=reading, result_slot=3, beat=0)
            await ctx.tick()
        assert done == 3

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == expected


def test_beats_out_of_range():
    """beats = 0 is taken as one beat and beats > packet_beats as packet_beats: one done each."""
    dut = SlotMemory(width=32, workers=2, slots=2, packet_beats=5, adder_stages=1)
    assert dut.beats_bits == 3
    rng = np.random.default_rng(4)
    contributions = make_contributions("fp32", 2, 2, 5, dut.lanes, rng)
    requests = [(0, 1, 0, 3), (1, 2, 7, 1), (0, 3, 6, 2), (1, 0, 0, 3)]
    run = simulate(dut, contributions, requests, seed=4)
    check_results(dut, contributions, [(0, 1, 1, 3), (1, 2, 5, 1), (0, 3, 5, 2), (1, 0, 1, 3)], run)
    assert np.diff(run.accepted).tolist() == [1, 5, 5], "the engine did not read the clipped beat counts"


def test_interface_and_latency():
    dut = SlotMemory()
    dut._MustUse__silence = True
    assert dut.latency == 21 and dut.tree.latency == 17 and dut.done_depth == 22
    assert (dut.worker_bits, dut.slot_bits, dut.result_slot_bits, dut.beat_bits, dut.beats_bits) == (3, 4, 5, 4, 5)
    assert len(dut.write) == 1 and len(dut.read) == 1
    assert len(dut.write[0].data) == 64 and len(dut.read[0].data) == 64
    assert len(dut.sum_request.payload.mask) == 8
    other = SlotMemory(workers=1, slots=1, packet_beats=1, write_ports=3, read_ports=2, fmt="fp16",
                       adder_stages=0)
    other._MustUse__silence = True
    assert other.latency == 1 + 0 + 1 + 4
    assert (other.worker_bits, other.slot_bits, other.result_slot_bits, other.beat_bits) == (1, 1, 2, 1)
    assert len(other.write) == 3 and len(other.read) == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"fmt": "fp8"}, "unknown floating-point format"),
    ({"width": 48}, "multiple of the fp32 element width"),
    ({"width": 0}, "width"),
    ({"fmt": "bf16", "width": 24}, "multiple of the bf16 element width"),
    ({"workers": 0}, "workers"),
    ({"workers": 65}, "workers"),
    ({"slots": 0}, "slots"),
    ({"packet_beats": 0}, "packet_beats"),
    ({"packet_beats": 2.0}, "packet_beats"),
    ({"write_ports": 0}, "write_ports"),
    ({"read_ports": 0}, "read_ports"),
    ({"adder_stages": MAX_ADDER_STAGES + 1}, "adder_stages"),
    ({"adder_stages": True}, "adder_stages"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SlotMemory(**kwargs)
