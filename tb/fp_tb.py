"""cocotb testbench of the floating-point adder and the adder tree, scored against netreduce.sim.fp.

The Amaranth tops :class:`AxisAdder` and :class:`AxisTree` put the components behind AXI-Stream ports
(``s_axis__tdata/tvalid/tready/tlast`` and ``m_axis__...``) so that cocotbext-axi drives and samples
them; ``tlast`` travels through the component's ``user`` sideband. Launched by
``tests/test_fp_cocotb.py`` through ``netreduce.sim.runner.run_cocotb``; the parameters are:

* ``top``: ``"adder"`` (both FTZ modes at once) or ``"tree"``; ``fmt``, ``ftz`` (tree), ``stages``;
* adder: ``spanning`` (number of exponent-spanning operands whose every ordered pair is added),
  ``random`` (number of biased random pairs; the corner-case table is always included);
* tree: ``n_inputs``, ``width``, ``beats``.
"""

import itertools

import numpy as np
from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..hw.fp import AdderTree, FPAdder
from ..sim import fp

__all__ = ["AxisAdder", "AxisTree"]


def _axis(width):
    return wiring.Signature({"tdata": Out(width), "tvalid": Out(1), "tready": In(1), "tlast": Out(1)})


class AxisAdder(wiring.Component):
    """Two FPAdders side by side, without and with FTZ, fed the same pairs: ``s_axis.tdata = {b, a}``
    and ``m_axis.tdata = {result_ftz, result}`` (one build covers both modes)."""

    def __init__(self, fmt="fp32", *, stages=4):
        self.adders = [FPAdder(fmt, stages=stages, ftz=ftz, user_width=1) for ftz in (False, True)]
        w = self.adders[0].fmt.width
        super().__init__({"s_axis": In(_axis(2 * w)), "m_axis": Out(_axis(2 * w))})

    def elaborate(self, platform):
        m = Module()
        w = self.adders[0].fmt.width
        for k, adder in enumerate(self.adders):
            m.submodules[f"adder{k}"] = adder
            m.d.comb += [
                adder.i.valid.eq(self.s_axis.tvalid),
                adder.i.payload.a.eq(self.s_axis.tdata[:w]),
                adder.i.payload.b.eq(self.s_axis.tdata[w:]),
                adder.i.payload.user.eq(self.s_axis.tlast),
                adder.o.ready.eq(self.m_axis.tready),
                self.m_axis.tdata[k * w:(k + 1) * w].eq(adder.o.payload.result),
            ]
        # the two pipelines are identical in timing: they accept and deliver together
        m.d.comb += [
            self.s_axis.tready.eq(self.adders[0].i.ready),
            self.m_axis.tvalid.eq(self.adders[0].o.valid),
            self.m_axis.tlast.eq(self.adders[0].o.payload.user),
        ]
        return m


class AxisTree(wiring.Component):
    """AdderTree with ``s_axis.tdata = {mask (bytes), data[N-1], ..., data[0]}`` and
    ``m_axis.tdata = {present (one byte), result}``."""

    def __init__(self, fmt="fp32", *, width=64, n_inputs=8, stages=4, ftz=False):
        self.tree = AdderTree(fmt, width=width, n_inputs=n_inputs, adder_stages=stages, ftz=ftz,
                              user_width=1)
        self.mask_bytes = (n_inputs + 7) // 8
        super().__init__({"s_axis": In(_axis(width * n_inputs + 8 * self.mask_bytes)),
                          "m_axis": Out(_axis(width + 8))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tree = tree = self.tree
        w, n = tree.width, tree.n_inputs
        m.d.comb += [
            tree.i.valid.eq(self.s_axis.tvalid),
            self.s_axis.tready.eq(tree.i.ready),
            tree.i.payload.mask.eq(self.s_axis.tdata[w * n:w * n + n]),
            tree.i.payload.user.eq(self.s_axis.tlast),
            self.m_axis.tvalid.eq(tree.o.valid),
            tree.o.ready.eq(self.m_axis.tready),
            self.m_axis.tdata.eq(Cat(tree.o.payload.data, tree.o.payload.present)),
            self.m_axis.tlast.eq(tree.o.payload.user),
        ]
        for k in range(n):
            m.d.comb += tree.i.payload.data[k].eq(self.s_axis.tdata[k * w:(k + 1) * w])
        return m


# ---------------------------------------------------------------------------------------------------
# cocotb side (imported by the simulator process only)

try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import RisingEdge
except ImportError:                                  # building the tops needs no cocotb
    cocotb = None


if cocotb is not None:
    from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

    from ..sim.runner import cocotb_params

    class TB:
        def __init__(self, dut):
            self.dut = dut
            self.params = cocotb_params()
            Clock(dut.clk, 10, unit="ns").start()
            self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"),
                                          dut.clk, dut.rst)
            self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                      dut.clk, dut.rst)

        def set_idle_generator(self, generator=None):
            self.source.set_pause_generator(generator() if generator else None)

        def set_backpressure_generator(self, generator=None):
            self.sink.set_pause_generator(generator() if generator else None)

        async def reset(self):
            self.dut.rst.value = 1
            for _ in range(3):
                await RisingEdge(self.dut.clk)
            self.dut.rst.value = 0
            for _ in range(2):
                await RisingEdge(self.dut.clk)

        async def transfer(self, words, in_bytes, out_bytes):
            """Send ``words`` (ints) as one frame, one word a beat; return the output words."""
            data = b"".join(int(w).to_bytes(in_bytes, "little") for w in words)
            await self.source.send(AxiStreamFrame(data))
            frame = await self.sink.recv()
            out = bytes(frame.tdata)
            assert len(out) == out_bytes * len(words), f"{len(out) // out_bytes} results for {len(words)}"
            return [int.from_bytes(out[i:i + out_bytes], "little") for i in range(0, len(out), out_bytes)]

    def _pauses():
        return itertools.cycle([0, 0, 1, 0, 1, 1, 0, 0, 0, 1])

    def _backpressure():
        return itertools.cycle([0, 1, 1, 0, 0, 0, 1, 0])

    def _adder_pairs(params):
        f = fp.get_format(params["fmt"])
        a, b = fp.corner_pairs(f)
        parts_a, parts_b = [a], [b]
        if params.get("random"):
            ra, rb = fp.random_pairs(f, params["random"], seed=params.get("seed", 1))
            parts_a.append(ra)
            parts_b.append(rb)
        return np.concatenate(parts_a), np.concatenate(parts_b)

    async def _check_adder(tb, a, b):
        f = fp.get_format(tb.params["fmt"])
        w = f.width
        words = (a.astype(np.uint64) | (b.astype(np.uint64) << np.uint64(w))).tolist()
        out = np.array(await tb.transfer(words, 2 * w // 8, 2 * w // 8), dtype=object)
        for k, ftz in enumerate((False, True)):
            got = np.array([(int(x) >> (k * w)) & ((1 << w) - 1) for x in out], dtype=np.int64)
            ref = fp.add(f, a, b, ftz).astype(np.int64)
            bad = np.nonzero(got != ref)[0]
            assert len(bad) == 0, f"ftz={ftz}: {len(bad)} of {len(a)} wrong; first: " + "; ".join(
                f"{int(a[i]):#x} + {int(b[i]):#x} = RTL {int(got[i]):#x}, expected {int(ref[i]):#x}"
                for i in bad[:5])
        tb.dut._log.info("%d pairs bit-exact, with and without FTZ", len(a))

    @cocotb.test()
    async def adder_vectors_with_stalls(dut):
        """Corner cases and biased random pairs with idle cycles and backpressure."""
        tb = TB(dut)
        if tb.params.get("top") != "adder":
            return
        await tb.reset()
        a, b = _adder_pairs(tb.params)
        tb.set_idle_generator(_pauses)
        tb.set_backpressure_generator(_backpressure)
        await _check_adder(tb, a, b)
        assert tb.sink.empty()

    @cocotb.test()
    async def adder_all_pairs_full_rate(dut):
        """Every ordered pair of the exponent-spanning operands, one pair per clock."""
        tb = TB(dut)
        if tb.params.get("top") != "adder" or not tb.params.get("spanning"):
            return
        await tb.reset()
        ops = fp.spanning_operands(tb.params["fmt"], tb.params["spanning"])
        a = np.repeat(ops, len(ops))
        b = np.tile(ops, len(ops))
        await _check_adder(tb, a, b)
        assert tb.sink.empty()

    @cocotb.test()
    async def tree_random_masks(dut):
        """Beats of random contributions with random masks (all-absent beats included), with stalls."""
        tb = TB(dut)
        p = tb.params
        if p.get("top") != "tree":
            return
        await tb.reset()
        f = fp.get_format(p["fmt"])
        n, width, beats = p["n_inputs"], p["width"], p["beats"]
        lanes = width // f.width
        rng = np.random.default_rng(p.get("seed", 1))
        c = fp.random_operands(f, beats * n * lanes, rng).reshape(beats, n, lanes)
        mask = rng.random((beats, n)) < rng.random((beats, 1))
        mask[0] = False
        words = []
        for t in range(beats):
            word = 0
            for k in range(n):
                for lane in range(lanes):
                    word |= int(c[t, k, lane]) << (k * width + lane * f.width)
            word |= sum(int(bit) << k for k, bit in enumerate(mask[t])) << (n * width)
            words.append(word)
        mask_bytes = (n + 7) // 8
        for pauses in (False, True):
            tb.set_idle_generator(_pauses if pauses else None)
            tb.set_backpressure_generator(_backpressure if pauses else None)
            got = await tb.transfer(words, (n * width) // 8 + mask_bytes, width // 8 + 1)
            for t in range(beats):
                ref = fp.tree_sum(f, c[t], mask[t], p.get("ftz", False))
                value = got[t] & ((1 << width) - 1)
                lanes_got = [(value >> (lane * f.width)) & ((1 << f.width) - 1) for lane in range(lanes)]
                assert lanes_got == ref.tolist(), f"beat {t}: {lanes_got} != {ref.tolist()}"
                assert got[t] >> width == int(mask[t].any())
        assert tb.sink.empty()
