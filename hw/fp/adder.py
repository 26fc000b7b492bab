"""Pipelined IEEE 754 adder, parametric in format (binary32, bfloat16, binary16).

Round to nearest, ties to even; subnormals in full, or flushed to zero with ``ftz``; any NaN operand and
inf + (-inf) give the canonical quiet NaN. The semantics are those of ``netreduce.sim.fp.add``.

Structure (after Berkeley HardFloat's AddRecFN and the classic two-path adder):

1. **unpack**: classify each operand and flush subnormals (FTZ); then, with the optional "classify"
   boundary between, order them by magnitude (``x`` the larger, ``y`` the smaller), exponent difference
   ``d``, path choice.
2. **align** (far path, effective addition or ``d >= 2``): shift ``y``'s significand right by ``d``
   into guard, round and sticky bits, in two steps (multiples of 4, then 0..3; the optional "shift"
   boundary lies between them). **close** (effective subtraction with ``d <= 1``): the exact
   difference on P+1 bits (massive cancellation is only possible here, and it is then exact).
3. **sum**: far path add/subtract; close path leading-zero count, which a "stop" bit decoded from the
   exponent limits so that the exponent never goes below the subnormal exponent.
4. **normalize**: far path by at most one bit either way, close path by the counted amount; one set of
   (significand, guard, sticky, exponent) goes on.
5. **round**: the one shared rounder (round to nearest, ties to even).
6. **pack**: exponent adjust (a carry of the rounding moves into the exponent field, which also turns a
   subnormal into the smallest normal number), overflow to infinity, specials, FTZ of tiny results.

Between these steps are the boundaries named in :data:`ADDER_BOUNDARIES`; ``stages`` of them, in that
order of preference, hold a register level. The latency is ``stages`` clocks and the initiation
interval is 1 at every depth.
"""

from amaranth.hdl import Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...formats import get_format
from .pipeline import choose_cuts, lzc, stream_pipeline, thermometer

__all__ = ["ADDER_BOUNDARIES", "MAX_ADDER_STAGES", "adder_datapath", "FPAdder", "check_format", "check_int",
           "check_lane_width"]

#: Register boundaries of the adder, most useful first: ``stages=k`` uses the first k.
ADDER_BOUNDARIES = ("output", "sum", "unpack", "normalize", "align", "classify", "round", "shift", "input")
MAX_ADDER_STAGES = len(ADDER_BOUNDARIES)


def check_format(fmt):
    try:
        return get_format(fmt)
    except ValueError as error:
        raise ValueError(str(error)) from None


def check_int(value, what, low, high):
    """``value``, an integer (not a bool) from ``low`` to ``high``, or a ``ValueError`` naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer from {low} to {high}, not {value!r}")
    return value


def check_lane_width(fmt, width):
    """``width``, a positive multiple of the element width of format ``fmt``, or a ``ValueError``."""
    ew = fmt.width
    if not isinstance(width, int) or isinstance(width, bool) or width <= 0 or width % ew:
        raise ValueError(f"width must be a positive multiple of the {fmt} element width {ew}, not {width!r}")
    return width


def adder_datapath(pipe, fmt, a, b, *, stages, ftz=False, name="add"):
    """Build the adder in ``pipe`` (a :class:`~.pipeline.Pipeline`) and return its result Value.

    ``a`` and ``b`` are bit patterns of ``fmt``; the result follows them by ``stages`` enabled clocks.
    """
    fmt = check_format(fmt)
    cuts = choose_cuts(stages, ADDER_BOUNDARIES, "FP adder")
    E, M = fmt.exp_bits, fmt.frac_bits
    P, W = M + 1, fmt.width
    EMAX = (1 << E) - 1
    SH = ceil_log2(P + 4)           # bits of the alignment shift amount

    def cut(values, where):
        return pipe.boundary(values, where in cuts, f"{name}_{where}")

    v = cut({"a": a, "b": b}, "input")

    # 1. unpack and classify ---------------------------------------------------------------------
    def unpack(x):
        s, e, f = x[W - 1], x[M:M + E], x[:M]
        ezero = e == 0
        emax = e == EMAX
        nan = emax & (f != 0)
        inf = emax & (f == 0)
        if ftz:
            f = Mux(ezero, 0, f)    # a subnormal reads as zero of its own sign
        eeff = Mux(ezero, 1, e)     # subnormals and zeros share exponent 1 with the hidden bit 0
        return s, Cat(f, e), Cat(f, ~ezero), eeff, nan, inf

    # each operand's classification on its own, then the two compared (the "classify" boundary between)
    fields = ("s", "mag", "sig", "eeff", "nan", "inf")
    v = cut({f"{x}_{f}": value for x in "ab" for f, value in zip(fields, unpack(v[x]), strict=True)}, "classify")
    a_s, a_mag, a_sig, a_eeff, a_nan, a_inf = (v[f"a_{f}"] for f in fields)
    b_s, b_mag, b_sig, b_eeff, b_nan, b_inf = (v[f"b_{f}"] for f in fields)
    # the magnitude comparison only selects among values computed beside it: both significands with their
    # hidden bits, both exponent differences and what they imply. It is two shorter carry chains side by
    # side (exponent fields, fraction fields) and a LUT, rather than one chain over both fields.
    swap = (b_mag[M:] > a_mag[M:]) | ((b_mag[M:] == a_mag[M:]) & (b_mag[:M] > a_mag[:M]))
    sub = a_s ^ b_s
    d_ab = (a_eeff - b_eeff)[:E]
    d_ba = (b_eeff - a_eeff)[:E]
    v = cut({
        "x_s": Mux(swap, b_s, a_s),
        "sub": sub,
        "close": sub & Mux(swap, d_ba[1:] == 0, d_ab[1:] == 0),
        "d0": Mux(swap, d_ba[0], d_ab[0]),
        "far_sh": Mux(swap, d_ba[:SH], d_ab[:SH]),   # a shifter of 2**SH - 1 >= P + 3 places ...
        "far_big": Mux(swap, d_ba[SH:] != 0, d_ab[SH:] != 0),   # ... unless d is larger still
        "x_sig": Mux(swap, b_sig, a_sig),
        "y_sig": Mux(swap, a_sig, b_sig),
        "x_eeff": Mux(swap, b_eeff, a_eeff),
        "nan": a_nan | b_nan | (a_inf & b_inf & sub),
        "inf": a_inf | b_inf,
    }, "unpack")

    # 2. far path: alignment with guard, round, sticky; close path: exact difference --------------
    # The alignment shifter is split in two: by the upper bits of the amount (multiples of 4), then by
    # the lower two bits, with the optional "shift" boundary between them.
    y3 = Cat(Const(0, 3), v["y_sig"])
    coarse_sh = Cat(Const(0, 2), v["far_sh"][2:])
    coarse = (y3 >> coarse_sh)[:P + 3]
    coarse_sticky = (y3 & thermometer(coarse_sh, P + 3)).any()
    x2 = Cat(Const(0, 1), v["x_sig"])
    y2 = Mux(v["d0"], Cat(v["y_sig"], Const(0, 1)), Cat(Const(0, 1), v["y_sig"]))
    # the normalizing shift of the close path may not take the exponent below 1 (subnormal results):
    # a "stop" bit at index P - (x_eeff - 1) makes the leading-zero count itself stop there
    limit = (v["x_eeff"] - 1)[:E]
    v = cut({
        "x_s": v["x_s"], "sub": v["sub"], "close": v["close"], "x_eeff": v["x_eeff"],
        "x_sig": v["x_sig"], "coarse": coarse, "fine_sh": v["far_sh"][:2],
        "sticky": Mux(v["far_big"], v["y_sig"].any(), coarse_sticky), "far_big": v["far_big"],
        "diff": (x2 - y2)[:P + 1], "stop": Cat(*(limit == P - i for i in range(P + 1))),
        "nan": v["nan"], "inf": v["inf"],
    }, "shift")
    fine = (v["coarse"] >> v["fine_sh"])[:P + 3]
    sticky = v["sticky"] | (v["coarse"] & thermometer(v["fine_sh"], 3)).any()
    shifted = Mux(v["far_big"], 0, fine)
    y_al = Cat(shifted[0] | sticky, shifted[1:])
    v = cut({
        "x_s": v["x_s"], "sub": v["sub"], "close": v["close"], "x_eeff": v["x_eeff"],
        "x_sig": v["x_sig"], "y_al": y_al,
        "diff": v["diff"], "dstop": v["diff"] | v["stop"],
        "nan": v["nan"], "inf": v["inf"],
    }, "align")

    # 3. far path sum; close path leading zeros ---------------------------------------------------
    x3 = Cat(Const(0, 3), v["x_sig"])
    total = x3 + Mux(v["sub"], ~v["y_al"], v["y_al"]) + v["sub"]
    far_sum = Cat(total[:P + 3], total[P + 3] & ~v["sub"])
    close_sh, _ = lzc(v["dstop"])                 # min(leading zeros, x_eeff - 1)
    v = cut({
        "x_s": v["x_s"], "sub": v["sub"], "close": v["close"], "x_eeff": v["x_eeff"],
        "far_sum": far_sum, "diff": v["diff"], "close_sh": close_sh, "dzero": v["diff"] == 0,
        "nan": v["nan"], "inf": v["inf"],
    }, "sum")

    # 4. normalize and select the path -------------------------------------------------------------
    s = v["far_sum"]
    carry = s[P + 3]
    keep = s[P + 2] | ~v["sub"]     # no shift; effective subtraction with d >= 2 loses at most one bit
    sig_f = Mux(carry, s[4:P + 4], Mux(keep, s[3:P + 3], s[2:P + 2]))
    g_f = Mux(carry, s[3], Mux(keep, s[2], s[1]))
    st_f = Mux(carry, s[:3].any(), Mux(keep, s[:2].any(), s[0]))
    exp_f = Mux(carry, v["x_eeff"] + 1, Mux(keep, v["x_eeff"], v["x_eeff"] - 1))[:E + 1]
    dn = (v["diff"] << v["close_sh"])[:P + 1]
    exp_c = Mux(v["dzero"], 1, (v["x_eeff"] - v["close_sh"])[:E + 1])   # exact cancellation: +0
    close = v["close"]
    v = cut({
        "sign": v["x_s"] & ~(close & v["dzero"]),
        "sig": Mux(close, dn[1:], sig_f),
        "g": Mux(close, dn[0], g_f),
        "st": ~close & st_f,
        "exp": Mux(close, exp_c, exp_f),
        "nan": v["nan"], "inf": v["inf"],
    }, "normalize")

    # 5. round to nearest, ties to even; the exponent candidates in parallel with the increment --------
    up = v["g"] & (v["st"] | v["sig"][0])
    exp = v["exp"]
    v = cut({
        "sign": v["sign"], "sig_up": (v["sig"] + up)[:P + 1],
        "field1": (exp - 1)[:E + 1], "field2": exp[:E + 1], "field3": (exp + 1)[:E + 1],
        "ovf2": exp >= EMAX, "ovf3": exp >= EMAX - 1,
        "nan": v["nan"], "inf": v["inf"],
    }, "round")

    # 6. pack: the hidden bit (or the carry of the rounding) lands in the exponent field ------------
    sig_up = v["sig_up"]
    hidden = sig_up[M:]                           # 0 (subnormal), 1, or 2 (the rounding carried out)
    field = Mux(hidden[1], v["field3"], Mux(hidden[0], v["field2"], v["field1"]))
    overflow = Mux(hidden[1], v["ovf3"], hidden[0] & v["ovf2"])
    sign = v["sign"]
    result = Mux(v["nan"], Const(fmt.canonical_nan, W),
             Mux(v["inf"] | overflow, Cat(Const(0, M), Const(EMAX, E), sign),
                 Cat(sig_up[:M], field[:E], sign)))
    if ftz:
        result = Mux(~v["nan"] & ~v["inf"] & ~overflow & ~hidden.any(), Cat(Const(0, W - 1), sign), result)
    return cut({"result": result}, "output")["result"]


class FPAdder(wiring.Component):
    """Pipelined IEEE 754 adder.

    Parameters
    ----------
    fmt : ``"fp32"``, ``"bf16"`` or ``"fp16"`` (or a :class:`netreduce.sim.fp.Format`)
    stages : number of register levels, 0 to :data:`MAX_ADDER_STAGES`; the latency in clocks
    ftz : flush subnormal operands and results to zero of the same sign
    user_width : width of a sideband that travels with each pair and comes out with its result
    backpressure : if true (default) the whole pipeline stalls while ``o`` holds a result that is not
        accepted; if false there is no clock enable, ``i.ready`` is always 1 and ``o.ready`` is ignored
        (the consumer must take every result: flow control by credits, using ``latency``). The streams
        are not declared ``always_ready`` because Amaranth cannot make a constant a top-level port.

    Members
    -------
    i : ``In(stream.Signature(StructLayout({"a", "b", "user"})))``
    o : ``Out(stream.Signature(StructLayout({"result", "user"})))``
    """

    def __init__(self, fmt="fp32", *, stages=4, ftz=False, user_width=0, backpressure=True):
        try:
            self.fmt = check_format(fmt)
            choose_cuts(stages, ADDER_BOUNDARIES, "FP adder")
            if not isinstance(user_width, int) or isinstance(user_width, bool) or user_width < 0:
                raise ValueError(f"user_width must be a non-negative integer, not {user_width!r}")
        except (TypeError, ValueError):
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        self.stages = stages
        self.latency = stages
        self.ftz = bool(ftz)
        self.user_width = user_width
        self.backpressure = bool(backpressure)
        w = self.fmt.width
        in_layout = data.StructLayout({"a": w, "b": w, "user": user_width})
        out_layout = data.StructLayout({"result": w, "user": user_width})
        super().__init__({
            "i": In(stream.Signature(in_layout)),
            "o": Out(stream.Signature(out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        pipe = stream_pipeline(m, self.i, self.o, self.backpressure)
        result = adder_datapath(pipe, self.fmt, self.i.payload.a, self.i.payload.b,
                                stages=self.stages, ftz=self.ftz)
        m.d.comb += [
            self.o.valid.eq(pipe.delay(self.i.valid, self.latency, "valid", reset_less=False)),
            self.o.payload.result.eq(result),
            self.o.payload.user.eq(pipe.delay(self.i.payload.user, self.latency, "user")),
        ]
        return m
