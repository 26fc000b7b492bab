"""The deterministic adder tree of the aggregator.

``L = width / element width`` lanes, each a balanced binary tree of binary32 adders over input index
0..N-1: pairs (0,1), (2,3), ..., then pairs of pairs; N is padded to a power of two with inputs that are
absent at build time. The semantics are those of ``netreduce.sim.fp.tree_sum``:

* an input whose ``mask`` bit is 0 is absent; a node with one absent child is its other child unchanged;
  a node with both absent is absent; an all-absent tree gives +0 (and ``present = 0``);
* every node rounds to binary32 (RNE); for bfloat16 and binary16 each leaf is widened exactly to
  binary32 and the root rounds once to the element format;
* with ``ftz``, subnormal leaves (in the element format) read as zero, every adder flushes, and the root
  flushes a tiny result; any NaN among the present inputs gives the canonical NaN.

How absence is built: an absent leaf enters its adder as -0. Since x + (-0) = x for every x that is not
a NaN (including both zeros and, without FTZ, subnormals; with FTZ no subnormal ever reaches an adder),
an absent child passes its sibling through, and a node with two absent children gives -0, which is again
"absent" for its parent. A NaN loses its payload on the way, which the root's canonical NaN hides. So
the mask costs one multiplexer per leaf and the present bit is needed only at the root. A node whose
right subtree is absent at build time (padding of N) is a delay line instead of an adder.

One beat per clock; the latency (in clocks) is :attr:`AdderTree.latency`; ``user`` travels along.
"""

from amaranth.hdl import Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...formats import FP32
from .adder import MAX_ADDER_STAGES, adder_datapath, check_format, check_int, check_lane_width
from .convert import NARROW_BOUNDARIES, narrow_datapath, widen
from .pipeline import stream_pipeline

__all__ = ["AdderTree", "MAX_INPUTS"]

MAX_INPUTS = 64
_NEG_ZERO = 0x8000_0000


class AdderTree(wiring.Component):
    """Deterministic FP adder tree: ``width // element width`` lanes times ``n_inputs`` inputs.

    Parameters
    ----------
    fmt : element format, ``"fp32"``, ``"bf16"`` or ``"fp16"``
    width : bits of one input (and of the output), a multiple of the element width (the switch's datapath widths,
        ``netreduce.wire.SWITCH_WIDTHS``; smaller widths are allowed for tests)
    n_inputs : N, 1 to :data:`MAX_INPUTS`
    adder_stages : register levels of each binary32 adder (see ``ADDER_BOUNDARIES``)
    root_stages : register levels of the root (NaN canonicalization, rounding to a 16-bit format), 0..2
    leaf_stages : 0 or 1 (default 1), a register level after the leaf widening and masking: it takes
        the mask multiplexer (and the binary16 normalization) out of the first adder level's first stage
    ftz : flush subnormals to zero, see the module documentation
    user_width : bits of the sideband that comes out with the result of its beat
    backpressure : as for :class:`~.adder.FPAdder`

    Members
    -------
    i : ``In(stream.Signature(StructLayout({"data": ArrayLayout(width, n_inputs), "mask": n_inputs,
        "user": user_width})))``; input ``k`` is ``data[k]``, lane ``l`` its bits
        ``[l*ew, (l+1)*ew)``
    o : ``Out(stream.Signature(StructLayout({"data": width, "present": 1, "user": user_width})))``;
        ``present`` is 1 when at least one mask bit was set

    Attributes
    ----------
    latency : clocks from a beat accepted on ``i`` to its result on ``o`` (when not stalled)
    lanes, levels : lanes per beat and adder levels (ceil(log2 N))
    """

    def __init__(self, fmt="fp32", *, width=64, n_inputs=8, adder_stages=4, root_stages=1, leaf_stages=1,
                 ftz=False, user_width=0, backpressure=True):
        try:
            self.fmt = check_format(fmt)
            self.width = check_lane_width(self.fmt, width)
            self.n_inputs = check_int(n_inputs, "n_inputs", 1, MAX_INPUTS)
            self.adder_stages = check_int(adder_stages, "adder_stages", 0, MAX_ADDER_STAGES)
            self.root_stages = check_int(root_stages, "root_stages", 0, len(NARROW_BOUNDARIES))
            self.leaf_stages = check_int(leaf_stages, "leaf_stages", 0, 1)
            self.user_width = check_int(user_width, "user_width", 0, 4096)
        except (TypeError, ValueError):
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        self.ftz = bool(ftz)
        self.backpressure = bool(backpressure)
        self.lanes = width // self.fmt.width
        self.levels = ceil_log2(self.n_inputs)
        self.latency = self.leaf_stages + self.levels * self.adder_stages + self.root_stages
        in_layout = data.StructLayout({
            "data": data.ArrayLayout(width, n_inputs),
            "mask": n_inputs,
            "user": user_width,
        })
        out_layout = data.StructLayout({"data": width, "present": 1, "user": user_width})
        super().__init__({
            "i": In(stream.Signature(in_layout)),
            "o": Out(stream.Signature(out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        pipe = stream_pipeline(m, self.i, self.o, self.backpressure)
        ew = self.fmt.width
        mask = self.i.payload.mask
        inputs = self.i.payload.data
        padded = 1 << self.levels

        results = []
        for lane in range(self.lanes):
            leaves = {}
            for k in range(self.n_inputs):
                x = inputs[k][lane * ew:(lane + 1) * ew]
                leaves[f"x{k}"] = Mux(mask[k], widen(self.fmt, x, self.ftz), Const(_NEG_ZERO, 32))
            leaves = pipe.boundary(leaves, self.leaf_stages == 1, f"l{lane}_leaf")
            nodes = [leaves[f"x{k}"] for k in range(self.n_inputs)] + [None] * (padded - self.n_inputs)
            for level in range(self.levels):
                nxt = []
                for j in range(0, len(nodes), 2):
                    left, right = nodes[j], nodes[j + 1]
                    name = f"l{lane}_n{level}_{j // 2}"
                    if left is None:
                        nxt.append(None)        # padding: absent at build time
                    elif right is None:
                        nxt.append(pipe.delay(left, self.adder_stages, name))
                    else:
                        nxt.append(adder_datapath(pipe, FP32, left, right, stages=self.adder_stages,
                                                  ftz=self.ftz, name=name))
                nodes = nxt
            results.append(nodes[0])

        depth = self.leaf_stages + self.levels * self.adder_stages
        present = pipe.delay(mask.any(), depth, "present")
        outs = []
        for lane, value in enumerate(results):
            outs.append(narrow_datapath(pipe, self.fmt, value, stages=self.root_stages, ftz=self.ftz,
                                        present=present, name=f"l{lane}_root"))
        m.d.comb += [
            self.o.valid.eq(pipe.delay(self.i.valid, self.latency, "valid", reset_less=False)),
            self.o.payload.data.eq(Cat(*outs)),
            self.o.payload.present.eq(pipe.delay(present, self.root_stages, "present_root")),
            self.o.payload.user.eq(pipe.delay(self.i.payload.user, self.latency, "user")),
        ]
        return m
