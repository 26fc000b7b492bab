"""amaranth.sim tests of netreduce.hw.fp.FPAdder against the golden model netreduce.sim.fp.add."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings, strategies as st

from netreduce.hw.fp import MAX_ADDER_STAGES, FPAdder
from netreduce.sim import fp
from netreduce.sim.amaranth_streams import shared_simulator

FORMATS = ["fp32", "bf16", "fp16"]


def with_clock(dut):
    """``dut`` in a module with a clock domain even when the adder has no register."""
    m = Module()
    m.submodules.dut = dut
    tick = Signal()
    m.d.sync += tick.eq(~tick)
    return m


def shared_adder(fmt, **params):
    """An ``FPAdder(fmt, **params)`` and its simulator, shared by the tests of this process."""
    return shared_simulator(("FPAdder", str(fmt), tuple(sorted(params.items()))),
                            lambda: FPAdder(fmt, **params), top=with_clock)


def run_adder(adder, a, b, *, idle=0.0, backpressure=0.0, seed=0):
    """Push the pairs through ``adder`` (``(dut, simulator)`` from ``shared_adder``) with optional idle
    cycles and output backpressure; returns the results and the user sideband values in output order."""
    dut, sim = adder
    rng = np.random.default_rng(seed)
    n = len(a)
    umask = (1 << dut.user_width) - 1
    results, users = [], []

    async def testbench(ctx):
        sent = 0
        cycles = 0
        while len(results) < n:
            cycles += 1
            assert cycles < 10 * n + 100, "the adder stopped producing results"
            offer = sent < n and rng.random() >= idle
            if offer:       # one set of the whole payload: every ctx.set settles the design
                ctx.set(dut.i.payload, {"a": int(a[sent]), "b": int(b[sent]), "user": sent & umask})
            ctx.set(dut.i.valid, int(offer))
            ready = int(rng.random() >= backpressure)
            ctx.set(dut.o.ready, ready)
            accepted = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ready:
                payload = ctx.get(dut.o.payload)
                results.append(int(payload.result))
                users.append(int(payload.user))
            await ctx.tick()
            sent += int(bool(accepted))

    sim.add_testbench(testbench)
    sim.run()
    return np.array(results, dtype=np.int64), users


def check(fmt, ftz, a, b, stages=3, **kwargs):
    f = fp.get_format(fmt)
    got, users = run_adder(shared_adder(f.name, stages=stages, ftz=ftz, user_width=8), a, b, **kwargs)
    ref = fp.add(f, a, b, ftz).astype(np.int64)
    bad = np.nonzero(got != ref)[0]
    assert len(bad) == 0, "\n".join(
        f"{int(a[i]):#x} + {int(b[i]):#x}: RTL {int(got[i]):#x}, expected {int(ref[i]):#x}" for i in bad[:10])
    assert users == [i & 0xFF for i in range(len(a))]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ftz", [False, True], ids=["subnormals", "ftz"])
def test_corner_cases(fmt, ftz):
    a, b = fp.corner_pairs(fmt)
    check(fmt, ftz, a, b)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ftz", [False, True], ids=["subnormals", "ftz"])
def test_biased_random(fmt, ftz):
    a, b = fp.random_pairs(fmt, 5000, seed=FORMATS.index(fmt) * 2 + ftz)
    check(fmt, ftz, a, b)


@pytest.mark.parametrize("stages", range(MAX_ADDER_STAGES + 1))
def test_every_depth(stages):
    a, b = fp.random_pairs("fp32", 300, seed=stages)
    check("fp32", False, a, b, stages=stages)


@pytest.mark.parametrize("stages", [0, 1, 4])
def test_stalls_and_idle(stages):
    """Backpressure stalls the whole pipeline without losing or reordering a result."""
    a, b = fp.random_pairs("bf16", 300, seed=7)
    check("bf16", False, a, b, stages=stages, idle=0.3, backpressure=0.4, seed=stages)


def test_one_result_per_clock():
    """With the output always ready, n pairs take n + latency clocks (initiation interval 1)."""
    dut = FPAdder("fp32", stages=6)
    m = Module()
    m.submodules.dut = dut
    a, b = fp.random_pairs("fp32", 50, seed=1)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(50 + dut.latency + 2):
            ctx.set(dut.i.valid, int(cycle < 50))
            if cycle < 50:
                ctx.set(dut.i.payload.a, int(a[cycle]))
                ctx.set(dut.i.payload.b, int(b[cycle]))
                assert ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid):
                seen.append(cycle)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == list(range(dut.latency, dut.latency + 50))


def test_no_backpressure_build():
    a, b = fp.random_pairs("fp16", 200, seed=3)
    got, _ = run_adder(shared_adder("fp16", stages=2, backpressure=False), a, b)
    assert np.array_equal(got, fp.add("fp16", a, b).astype(np.int64))


def _operand(fmt):
    f = fp.get_format(fmt)
    exps = st.one_of(st.integers(0, f.exp_max_field), st.integers(0, 2),
                     st.integers(f.exp_max_field - 2, f.exp_max_field),
                     st.integers(f.bias - f.precision - 2, f.bias + 2))
    fracs = st.one_of(st.integers(0, f.frac_mask), st.sampled_from([0, 1, f.frac_mask, f.frac_mask - 1]),
                      st.integers(0, f.frac_bits).map(lambda k: (1 << k) - 1))
    return st.builds(lambda s, e, m: (s << (f.width - 1)) | (e << f.frac_bits) | m,
                     st.integers(0, 1), exps, fracs)


def _pair(fmt):
    f = fp.get_format(fmt)
    near = st.tuples(_operand(fmt), st.integers(0, f.precision + 3), st.integers(0, f.frac_mask),
                     st.booleans()).map(
        lambda t: (t[0], ((t[0] ^ (f.sign_mask if t[3] else 0)) & f.sign_mask)
                   | (max(((t[0] >> f.frac_bits) & f.exp_max_field) - t[1], 0) << f.frac_bits) | t[2]))
    return st.one_of(st.tuples(_operand(fmt), _operand(fmt)), near)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ftz", [False, True], ids=["subnormals", "ftz"])
def test_hypothesis(fmt, ftz):
    f = fp.get_format(fmt)

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_pair(fmt), min_size=20, max_size=120))
    def inner(pairs):
        a = np.array([p[0] for p in pairs], dtype=f.dtype)
        b = np.array([p[1] for p in pairs], dtype=f.dtype)
        check(fmt, ftz, a, b, stages=2)

    inner()


@pytest.mark.parametrize("kwargs, message", [
    ({"fmt": "fp64"}, "unknown floating-point format"),
    ({"stages": MAX_ADDER_STAGES + 1}, "between 0 and"),
    ({"stages": -1}, "between 0 and"),
    ({"stages": 2.5}, "must be an integer"),
    ({"user_width": -1}, "user_width"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        FPAdder(**kwargs)
