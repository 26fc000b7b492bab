"""Format conversions of the adder tree: exact widening of a leaf to binary32, and the one rounding of the
root from binary32 to the element format. The semantics are those of ``netreduce.sim.fp.widen_to_fp32``
and ``narrow_from_fp32`` (with ``ftz``, as in ``netreduce.sim.fp.tree_sum``).
"""

from amaranth.hdl import Cat, Const, Mux

from ...formats import BF16, FP16, FP32
from .adder import check_format
from .pipeline import choose_cuts, lzc, thermometer

__all__ = ["widen", "narrow_datapath", "NARROW_BOUNDARIES"]

#: Register boundaries of the root rounding, most useful first.
NARROW_BOUNDARIES = ("output", "shift")


def _flush32(x):
    return Mux(x[23:31] == 0, Cat(Const(0, 31), x[31]), x)


def widen(fmt, x, ftz=False):
    """Combinational, exact: the binary32 bit pattern of ``fmt`` pattern ``x``.

    With ``ftz`` a subnormal ``x`` gives zero of its sign. A NaN stays a NaN (its payload is not kept:
    the root makes every NaN canonical).
    """
    fmt = check_format(fmt)
    if fmt is FP32:
        return _flush32(x) if ftz else x
    if fmt is BF16:
        wide = Cat(Const(0, 16), x)
        return _flush32(wide) if ftz else wide
    assert fmt is FP16
    s, e, f = x[15], x[10:15], x[:10]
    normal = Cat(Const(0, 13), f, (e + 112)[:8], s)
    special = Cat(Const(0, 13), f, Const(0xFF, 8), s)
    zero = Cat(Const(0, 31), s)
    if ftz:
        subnormal = zero
    else:
        lz, _ = lzc(f)                           # f != 0 here; the value is 2**(-15 - lz) * 1.xxx
        frac = (f << (lz + 1))[:10]
        subnormal = Cat(Const(0, 13), frac, (112 - lz)[:8], s)
    return Mux(e == 0x1F, special, Mux(e == 0, Mux(f == 0, zero, subnormal), normal))


def narrow_datapath(pipe, fmt, x, *, stages, ftz=False, present=None, name="root"):
    """Round binary32 pattern ``x`` once to ``fmt`` (RNE, canonical NaN), with ``stages`` registers.

    With ``ftz`` a result that is tiny after rounding (unbounded exponent range) is zero of its sign.
    With ``present`` (a 1-bit Value arriving with ``x``), the result is +0 when it is 0; the gate is
    applied last, beside the rounding instead of in front of it.
    """
    fmt = check_format(fmt)
    cuts = choose_cuts(stages, NARROW_BOUNDARIES, "root rounding")

    def cut(values, where):
        if where == "output" and present is not None:
            values = {"result": Mux(gate["present"], values["result"], 0)}
        return pipe.boundary(values, where in cuts, f"{name}_{where}")

    gate = {"present": Const(1, 1) if present is None else present}
    gate = pipe.boundary(gate, "shift" in cuts, f"{name}_gate")

    s, e, f = x[31], x[23:31], x[:23]
    nan = (e == 0xFF) & (f != 0)
    if fmt is FP32:
        v = cut({"x": x, "nan": nan}, "shift")
        result = Mux(v["nan"], Const(FP32.canonical_nan, 32), v["x"])
        return cut({"result": result}, "output")["result"]

    if fmt is BF16:
        v = cut({"x": x, "nan": nan}, "shift")
        x = v["x"]
        up = x[15] & ((x[:15] != 0) | x[16])
        rounded = (x[16:31] + up)[:15]           # a carry moves into the exponent; 0x7F80 is infinity
        result = Mux(v["nan"], Const(BF16.canonical_nan, 16), Cat(rounded, x[31]))
        if ftz:
            result = Mux(~v["nan"] & (rounded[7:] == 0), Cat(Const(0, 15), x[31]), result)
        return cut({"result": result}, "output")["result"]

    assert fmt is FP16
    sig = Cat(f, e != 0)                          # 24 bits
    t1 = Cat(e, Const(0, 2)).as_signed() - 113   # the binary16 biased exponent minus one, unbounded
    if ftz:
        shifted, sticky_r = sig, Const(0, 1)
    else:
        r = Mux(e >= 113, 0, Mux(e < 101, 12, (113 - e)[:4]))[:4]   # extra shift into the subnormals
        shifted = sig >> r
        sticky_r = (sig & thermometer(r, 24)).any()
        t1 = Mux(t1 < 0, 0, t1)
    v = cut({
        "sign": s, "nan": nan, "inf": e == 0xFF, "big": e >= 143,
        "t1": t1, "keep": shifted[13:24], "g": shifted[12], "st": (shifted[:12] != 0) | sticky_r,
    }, "shift")
    up = v["g"] & (v["st"] | v["keep"][0])
    val = (v["t1"] << 10) + v["keep"] + up        # the hidden bit (or a carry) lands in the exponent
    overflow = v["big"] | (val >= 0x7C00)
    sign = v["sign"]
    result = Mux(v["nan"], Const(FP16.canonical_nan, 16),
             Mux(v["inf"] | overflow, Cat(Const(0x7C00, 15), sign),
                 Cat(val[:15], sign)))
    if ftz:
        result = Mux(~v["nan"] & ~v["inf"] & ~overflow & (val < 0x400), Cat(Const(0, 15), sign), result)
    return cut({"result": result}, "output")["result"]
