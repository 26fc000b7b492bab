"""amaranth.sim tests of netreduce.hw.fp.AdderTree against the golden model netreduce.sim.fp.tree_sum."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from netreduce.hw.fp import MAX_ADDER_STAGES, MAX_INPUTS, AdderTree
from netreduce.sim import fp


def make_beats(fmt, n_inputs, lanes, beats, seed, mask_density=None):
    f = fp.get_format(fmt)
    rng = np.random.default_rng(seed)
    c = fp.random_operands(f, beats * n_inputs * lanes, rng).reshape(beats, n_inputs, lanes)
    # some beats of small values of mixed signs around one exponent: real cancellation in the tree
    near = rng.random(beats) < 0.4
    e = rng.integers(f.bias - 4, f.bias + 4, (beats, n_inputs, lanes))
    close = ((rng.integers(0, 2, e.shape) << (f.width - 1)) | (e << f.frac_bits)
             | rng.integers(0, f.frac_mask + 1, e.shape)).astype(f.dtype)
    c = np.where(near[:, None, None], close, c)
    density = rng.random((beats, 1)) if mask_density is None else mask_density
    mask = rng.random((beats, n_inputs)) < density
    return c, mask


def run_tree(dut, c, mask, *, idle=0.0, backpressure=0.0, seed=0):
    rng = np.random.default_rng(seed)
    ew = dut.fmt.width
    m = Module()
    m.submodules.dut = dut
    tick = Signal()
    m.d.sync += tick.eq(~tick)
    beats = c.shape[0]
    umask = (1 << dut.user_width) - 1
    out, users, present = [], [], []

    async def testbench(ctx):
        sent = 0
        cycles = 0
        while len(out) < beats:
            cycles += 1
            assert cycles < 10 * beats + 100
            offer = sent < beats and rng.random() >= idle
            if offer:       # one set of the whole payload: every ctx.set settles the design
                ctx.set(dut.i.payload, {
                    "data": [sum(int(c[sent, k, lane]) << (lane * ew) for lane in range(dut.lanes))
                             for k in range(dut.n_inputs)],
                    "mask": sum(int(b) << k for k, b in enumerate(mask[sent])),
                    "user": sent & umask})
            ctx.set(dut.i.valid, int(offer))
            ready = int(rng.random() >= backpressure)
            ctx.set(dut.o.ready, ready)
            accepted = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ready:
                payload = ctx.get(dut.o.payload)
                value = int(payload.data)
                out.append([(value >> (lane * ew)) & ((1 << ew) - 1) for lane in range(dut.lanes)])
                users.append(int(payload.user))
                present.append(int(payload.present))
            await ctx.tick()
            sent += int(bool(accepted))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return np.array(out, dtype=np.int64).reshape(beats, dut.lanes), users, present


def check_tree(fmt, ftz, n_inputs, *, width=None, beats=60, seed=0, **kwargs):
    f = fp.get_format(fmt)
    width = width or 2 * f.width
    dut = AdderTree(f, width=width, n_inputs=n_inputs, ftz=ftz, user_width=6,
                    adder_stages=kwargs.pop("adder_stages", 2), root_stages=kwargs.pop("root_stages", 1),
                    leaf_stages=kwargs.pop("leaf_stages", 0))
    c, mask = make_beats(f, n_inputs, dut.lanes, beats, seed)
    got, users, present = run_tree(dut, c, mask, seed=seed, **kwargs)
    ref = np.stack([fp.tree_sum(f, c[t], mask[t], ftz) for t in range(beats)]).astype(np.int64)
    bad = np.argwhere(got != ref)
    assert len(bad) == 0, "\n".join(
        f"beat {t} lane {lane}: inputs {[hex(int(x)) for x in c[t, :, lane]]} mask {mask[t].astype(int)}: "
        f"RTL {int(got[t, lane]):#x}, expected {int(ref[t, lane]):#x}" for t, lane in bad[:5])
    assert users == [t & 0x3F for t in range(beats)]
    assert present == [int(mask[t].any()) for t in range(beats)]


# The fast tier takes every n once (binary32 with subnormals); each format's adder, with and without
# FTZ, is tested on its own there (test_fp_adder.py) and in the trees below. The full suite takes every n
# in every format, FTZ on and off.
@pytest.mark.parametrize("fmt, ftz", [
    pytest.param(fmt, ftz, id=f"{'ftz' if ftz else 'subnormals'}-{fmt}",
                 marks=() if (fmt, ftz) == ("fp32", False) else pytest.mark.slow)
    for fmt in ("fp32", "bf16", "fp16") for ftz in (False, True)])
def test_tree_every_n(fmt, ftz):
    for n in range(1, 9):
        check_tree(fmt, ftz, n, beats=30, seed=n)


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp16"])
def test_tree_stalls(fmt):
    check_tree(fmt, False, 5, beats=80, idle=0.3, backpressure=0.4, seed=9)


def test_tree_depths():
    check_tree("fp16", False, 4, adder_stages=0, root_stages=0, beats=40)
    check_tree("fp16", False, 3, adder_stages=6, root_stages=2, leaf_stages=1, beats=40)
    check_tree("fp32", True, 8, adder_stages=7, root_stages=2, leaf_stages=1, beats=40)


def test_tree_wide_inputs():
    """More than 8 inputs, and the 64-bit datapath with 4 lanes of bfloat16."""
    check_tree("fp32", False, 13, width=32, beats=40, seed=4)
    check_tree("bf16", False, 8, width=64, beats=40, seed=5)


def test_tree_latency_and_throughput():
    dut = AdderTree("fp32", width=64, n_inputs=8, adder_stages=4, root_stages=1)
    assert dut.latency == 1 + 3 * 4 + 1
    for other, latency in [
        (AdderTree("bf16", width=64, n_inputs=5, adder_stages=3, root_stages=2, leaf_stages=1), 1 + 3 * 3 + 2),
        (AdderTree("fp32", width=32, n_inputs=1, root_stages=1, leaf_stages=0), 1),
    ]:
        other._MustUse__silence = True          # built only for its latency attribute
        assert other.latency == latency
    m = Module()
    m.submodules.dut = dut
    seen = []

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(30 + dut.latency + 2):
            ctx.set(dut.i.valid, int(cycle < 30))
            ctx.set(dut.i.payload.mask, 0xFF)
            if ctx.get(dut.o.valid):
                seen.append(cycle)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert seen == list(range(dut.latency, dut.latency + 30))


@pytest.mark.parametrize("kwargs, message", [
    ({"fmt": "fp8"}, "unknown floating-point format"),
    ({"width": 48}, "multiple of the fp32 element width"),
    ({"n_inputs": 0}, "n_inputs"),
    ({"n_inputs": MAX_INPUTS + 1}, "n_inputs"),
    ({"adder_stages": MAX_ADDER_STAGES + 1}, "adder_stages"),
    ({"root_stages": 3}, "root_stages"),
    ({"leaf_stages": 2}, "leaf_stages"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdderTree(**kwargs)


@pytest.mark.slow(minutes=1)
def test_tree_max_inputs():
    """The largest tree (MAX_INPUTS inputs, one binary16 lane) with random masks."""
    check_tree("fp16", False, MAX_INPUTS, width=16, beats=16, adder_stages=1, root_stages=0, seed=11)
