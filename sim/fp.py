"""Golden model of the floating-point adders and of the deterministic adder tree.

Written from IEEE 754-2019 (round to nearest, ties to even) and the design brief, never from the RTL.
Every function works on numpy arrays of raw bit patterns (``uint32`` for binary32, ``uint16`` for
bfloat16 and binary16) and is bit-exact with ``netreduce.hw.fp``.

Semantics (see docs/ARCHITECTURE.md, "Floating point"):

* ``add(fmt, a, b, ftz)``: the correctly rounded sum. Any NaN operand, and inf + (-inf), give the
  canonical quiet NaN of the format. An exact zero sum is +0, except (-0) + (-0) = -0.
* Flush to zero (``ftz=True``): a subnormal operand is read as zero of its own sign; a result that is
  tiny (nonzero and, rounded to the format's precision with an unbounded exponent range, below the
  smallest normal number: IEEE 754 "tininess after rounding") becomes zero of its own sign. A sum of two
  floating-point numbers that lands below the smallest normal number is always exact, so for the adder
  every definition of tininess agrees; the distinction matters only for the root rounding of the tree.
* ``tree_sum(fmt, contributions, mask, ftz)``: the balanced binary tree over input index 0..N-1
  (pairs (0,1), (2,3), ..., then pairs of pairs; N is padded with absent inputs to a power of two). An
  absent input (mask bit 0) is absent; a node with one absent child is its other child unchanged; a node
  with both absent is absent; an all-absent tree gives +0. Every node rounds to binary32. For the 16-bit
  formats the leaves are widened exactly to binary32 and the root rounds once to the 16-bit format. With
  ``ftz``, subnormal leaves (in their own format) read as zero, every binary32 node flushes as ``add``
  does, and the root flushes a tiny 16-bit result. A NaN anywhere among the present inputs gives the
  canonical NaN.

The references: binary32 sums use numpy's float32 addition (IEEE round to nearest even); 16-bit sums
are computed exactly (binary16: always exact in float64; bfloat16: exact in float64 unless the exponents
differ by more than 40, when the smaller operand is far below half an ulp and cannot change the result)
and rounded once by :func:`round_exact`, an integer implementation of IEEE rounding.
"""

import numpy as np

from netreduce.formats import BF16, FORMATS, FP16, FP32, Format, get_format

__all__ = ["Format", "FORMATS", "FP32", "BF16", "FP16", "get_format", "add", "tree_sum", "round_exact",
           "to_float64", "from_float64", "is_nan", "is_subnormal", "canonicalize", "flush_subnormal",
           "widen_to_fp32", "narrow_from_fp32"]


def _bits(fmt, x):
    x = np.asarray(x)
    if x.dtype.kind not in "ui":
        raise TypeError(f"expected an integer array of {fmt} bit patterns, not {x.dtype}")
    if np.any(x < 0) or np.any(x >> fmt.width):
        raise ValueError(f"bit pattern out of range for {fmt}")
    return x.astype(np.int64)


def is_nan(fmt, x):
    x = _bits(get_format(fmt), x)
    fmt = get_format(fmt)
    return ((x & fmt.abs_mask) > fmt.inf)


def is_subnormal(fmt, x):
    fmt = get_format(fmt)
    x = _bits(fmt, x)
    return ((x & fmt.inf) == 0) & ((x & fmt.frac_mask) != 0)


def flush_subnormal(fmt, x):
    """Subnormal bit patterns replaced by zero of the same sign."""
    fmt = get_format(fmt)
    x = _bits(fmt, x)
    return np.where(is_subnormal(fmt, x), x & fmt.sign_mask, x).astype(fmt.dtype)


def canonicalize(fmt, x):
    """NaN bit patterns replaced by the canonical quiet NaN."""
    fmt = get_format(fmt)
    x = _bits(fmt, x)
    return np.where(is_nan(fmt, x), fmt.canonical_nan, x).astype(fmt.dtype)


def to_float64(fmt, x):
    """The exact value of each bit pattern as float64 (every format here is a subset of binary64)."""
    fmt = get_format(fmt)
    x = _bits(fmt, x)
    sign = np.where(x & fmt.sign_mask, -1.0, 1.0)
    e = (x >> fmt.frac_bits) & fmt.exp_max_field
    f = (x & fmt.frac_mask).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        normal = np.ldexp(f + (1 << fmt.frac_bits), np.maximum(e, 1) - fmt.bias - fmt.frac_bits)
        sub = np.ldexp(f, fmt.emin - fmt.frac_bits)
        mag = np.where(e == 0, sub, normal)
        mag = np.where(e == fmt.exp_max_field, np.where(f == 0, np.inf, np.nan), mag)
    return sign * mag


def round_exact(fmt, sign, sig, exp2, ftz=False):
    """IEEE round-to-nearest-even of ``(-1)**sign * sig * 2**exp2`` to ``fmt``, as bit patterns.

    ``sig`` is a non-negative integer array below 2**53, ``exp2`` an integer array. Overflow gives
    infinity. With ``ftz``, a tiny result (after rounding with unbounded exponent range) gives zero of
    the same sign; without, subnormal results are rounded at their own precision.
    """
    fmt = get_format(fmt)
    sign = np.asarray(sign).astype(np.int64) & 1
    sig = np.asarray(sig).astype(np.int64)
    exp2 = np.asarray(exp2).astype(np.int64)
    sign, sig, exp2 = np.broadcast_arrays(sign, sig, exp2)
    if np.any(sig < 0) or np.any(sig >= (1 << 53)):
        raise ValueError("significand out of range")
    nonzero = sig != 0
    safe = np.where(nonzero, sig, 1)
    msb = np.frexp(safe.astype(np.float64))[1].astype(np.int64) - 1  # exact: safe < 2**53
    e_unb = msb + exp2                     # value in [2**e_unb, 2**(e_unb + 1))
    quantum = e_unb - fmt.frac_bits        # exponent of the last kept bit
    if not ftz:
        quantum = np.maximum(quantum, fmt.emin - fmt.frac_bits)
    shift = quantum - exp2
    right = np.clip(shift, 0, 60)
    left = np.clip(-shift, 0, 60)
    kept = np.where(shift > 0, safe >> right, safe << left)
    rem = np.where(shift > 0, safe & ((np.int64(1) << right) - 1), 0)
    half = np.where(shift > 0, np.int64(1) << np.maximum(right - 1, 0), 1)
    up = (shift > 0) & ((rem > half) | ((rem == half) & ((kept & 1) == 1)))
    kept = kept + up
    carry = kept >> fmt.precision
    kept = np.where(carry != 0, kept >> 1, kept)
    quantum = quantum + carry
    is_normal = kept >= (1 << fmt.frac_bits)
    biased = np.where(is_normal, quantum + fmt.frac_bits + fmt.bias, 0)
    frac = kept & fmt.frac_mask
    mag = np.where(biased >= fmt.exp_max_field, fmt.inf, (np.maximum(biased, 0) << fmt.frac_bits) | frac)
    if ftz:
        mag = np.where(biased < 1, 0, mag)
    mag = np.where(nonzero, mag, 0)
    return ((sign << (fmt.width - 1)) | mag).astype(fmt.dtype)


def from_float64(fmt, x, ftz=False):
    """Round float64 values to ``fmt`` (RNE); NaN gives the canonical NaN."""
    fmt = get_format(fmt)
    x = np.asarray(x, dtype=np.float64)
    sign = np.signbit(x).astype(np.int64)
    finite = np.isfinite(x)
    mant, e = np.frexp(np.where(finite, np.abs(x), 0.0))
    sig = np.ldexp(mant, 53).astype(np.int64)
    out = round_exact(fmt, sign, sig, e.astype(np.int64) - 53, ftz).astype(np.int64)
    out = np.where(np.isinf(x), (sign << (fmt.width - 1)) | fmt.inf, out)
    out = np.where(np.isnan(x), fmt.canonical_nan, out)
    return out.astype(fmt.dtype)


def _as_fp32(x):
    return np.asarray(x).astype(np.uint32).view(np.float32)


def add(fmt, a_bits, b_bits, ftz=False):
    """IEEE 754 sum of two arrays of bit patterns (RNE, canonical NaN, optional flush to zero)."""
    fmt = get_format(fmt)
    a = _bits(fmt, a_bits)
    b = _bits(fmt, b_bits)
    a, b = np.broadcast_arrays(a, b)
    if ftz:
        a = flush_subnormal(fmt, a)
        b = flush_subnormal(fmt, b)
    if fmt is FP32:
        with np.errstate(all="ignore"):
            s = (_as_fp32(a) + _as_fp32(b)).view(np.uint32)
        if ftz:
            s = flush_subnormal(fmt, s)
        return canonicalize(fmt, s)
    with np.errstate(all="ignore"):
        s = to_float64(fmt, a) + to_float64(fmt, b)
    out = from_float64(fmt, s, ftz)
    # an exact zero: +0 unless both operands are -0 (numpy's float64 sum already follows this rule, and
    # from_float64 keeps the sign of zero)
    return out


def widen_to_fp32(fmt, x):
    """Exact conversion of 16-bit bit patterns to binary32 bit patterns (NaN to the canonical NaN)."""
    fmt = get_format(fmt)
    v = to_float64(fmt, x)
    return from_float64(FP32, v)


def narrow_from_fp32(fmt, x, ftz=False):
    """Round binary32 bit patterns to ``fmt`` once (RNE; NaN to the canonical NaN)."""
    fmt = get_format(fmt)
    return from_float64(fmt, to_float64(FP32, x), ftz)


def tree_sum(fmt, contributions, mask=None, ftz=False):
    """The deterministic tree sum of ``contributions[0..N-1]`` (axis 0) with presence ``mask``.

    ``contributions`` has shape (N, ...) of ``fmt`` bit patterns; ``mask`` has shape (N,) or a shape
    that broadcasts against ``contributions`` (True = present), default all present. Returns shape (...).
    """
    fmt = get_format(fmt)
    c = _bits(fmt, contributions)
    if c.ndim == 0:
        raise ValueError("contributions need an input axis")
    n = c.shape[0]
    if n < 1:
        raise ValueError("tree_sum needs at least one input")
    if mask is None and not ftz:
        return _tree_sum_all_present(fmt, c)
    if mask is None:
        mask = np.ones(n, dtype=bool)
    mask = np.asarray(mask).astype(bool)
    if mask.ndim == 1:
        if mask.shape[0] != n:
            raise ValueError(f"mask has {mask.shape[0]} entries for {n} inputs")
        mask = mask.reshape((n,) + (1,) * (c.ndim - 1))
    mask = np.broadcast_to(mask, c.shape)
    if ftz:
        c = flush_subnormal(fmt, c).astype(np.int64)
    values = [c[i] if fmt is FP32 else widen_to_fp32(fmt, c[i]) for i in range(n)]
    values = [np.asarray(v).astype(np.uint32) for v in values]
    present = [mask[i].copy() for i in range(n)]
    width = 1
    while width < n:
        width *= 2
    zero = np.zeros(c.shape[1:], dtype=np.uint32)
    values += [zero] * (width - n)
    present += [np.zeros(c.shape[1:], dtype=bool)] * (width - n)
    while len(values) > 1:
        nv, np_ = [], []
        for i in range(0, len(values), 2):
            lv, rv, lp, rp = values[i], values[i + 1], present[i], present[i + 1]
            s = add(FP32, lv, rv, ftz)
            v = np.where(lp & rp, s, np.where(lp, lv, rv)).astype(np.uint32)
            nv.append(v)
            np_.append(lp | rp)
        values, present = nv, np_
    root = np.where(present[0], values[0], 0).astype(np.uint32)
    if fmt is FP32:
        return canonicalize(FP32, root)
    return narrow_from_fp32(fmt, root, ftz)


def _tree_sum_all_present(fmt, c):
    """:func:`tree_sum` without a mask or flushing, on numpy's binary32 arithmetic (IEEE 754 RNE, no
    flushing) a level at a time: the golden model's fast path for whole packets. Padding the inputs to a
    power of two with absent leaves leaves each level's odd last node without a sibling, so it passes up
    unchanged."""
    values = c.astype(np.uint32) if fmt is FP32 else widen_to_fp32(fmt, c).astype(np.uint32)
    level = values.view(np.float32)
    with np.errstate(all="ignore"):
        while level.shape[0] > 1:
            pairs = level.shape[0] // 2
            summed = level[0:2 * pairs:2] + level[1:2 * pairs:2]
            level = np.concatenate([summed, level[2 * pairs:]]) if level.shape[0] % 2 else summed
    root = level[0].view(np.uint32)
    if fmt is FP32:
        return canonicalize(FP32, root)
    return narrow_from_fp32(fmt, root)


# ---------------------------------------------------------------------------------------------------
# test vectors (shared by the unit tests, the cocotb testbench and the benchmarks)

def _pack(fmt, s, e, f):
    return (int(s) << (fmt.width - 1)) | (int(e) << fmt.frac_bits) | int(f)


def corner_pairs(fmt):
    """Operand pairs ``(a, b)`` (two arrays) covering the adder's corner cases in ``fmt``.

    Signed zeros, exact cancellation, exponent differences 0 and 1 (close path, massive cancellation),
    every alignment from 0 to beyond the significand (far path, with the guard, round and sticky bits),
    carry-out into the next binade, ties rounding down and up (to even), the largest finite number
    plus one ulp and plus half an ulp (overflow), subnormal plus subnormal into the normal range,
    normal minus normal into the subnormals, infinities and NaNs (quiet, signalling, with payloads).
    Every pair is also given in the swapped order and with both signs flipped.
    """
    fmt = get_format(fmt)
    P, M, B = fmt.precision, fmt.frac_bits, fmt.bias
    EM = fmt.exp_max_field
    fm = fmt.frac_mask
    one = _pack(fmt, 0, B, 0)
    max_finite = _pack(fmt, 0, EM - 1, fm)
    min_normal = _pack(fmt, 0, 1, 0)
    max_sub = _pack(fmt, 0, 0, fm)
    inf = fmt.inf
    qnan = fmt.canonical_nan
    snan = _pack(fmt, 0, EM, 1)
    nan_payload = _pack(fmt, 1, EM, fm)
    neg = fmt.sign_mask
    pairs = [
        (0, 0), (0, neg), (neg, neg),
        (one, one | neg), (max_finite, max_finite | neg), (max_sub, max_sub | neg), (1, 1 | neg),
        (one, one), (one | 1, one), (one, (one - 1) | neg), (one | 1, one | neg),
        (max_finite, _pack(fmt, 0, EM - 1 - P, 0)),            # + one ulp: exactly 2**(emax+1)
        (max_finite, _pack(fmt, 0, EM - 2 - P, 0)),            # + half an ulp: a tie, odd: up
        (max_finite, _pack(fmt, 0, EM - 2 - P, fm)),           # just below half an ulp
        (max_finite, max_finite),
        (max_sub, 1), (max_sub, max_sub), (1, 1), (max_sub, min_normal), (min_normal, 1 | neg),
        (min_normal | 1, min_normal | neg), (_pack(fmt, 0, 2, 0), (min_normal | 1) | neg),
        (inf, inf), (inf, inf | neg), (inf, one), (inf, max_finite | neg), (inf | neg, 0),
        (qnan, one), (snan, one), (nan_payload, inf), (qnan, snan), (one, nan_payload), (qnan, inf | neg),
    ]
    for d in range(0, P + 5):
        e = B - d
        if e < 1:
            break
        small = _pack(fmt, 0, e, 0)
        pairs += [(one, small), (one, small | neg), (one, small | 1), (one, (small | 1) | neg),
                  (one | fm, small), (one | 1, small | neg), (one, _pack(fmt, 0, e, fm) | neg)]
    # ties: 1 + half an ulp (down to even), (1 + ulp) + half an ulp (up to even)
    half = _pack(fmt, 0, B - P, 0)
    pairs += [(one, half), (one | 1, half), (one, half | neg), (one | 1, half | neg),
              (one | fm, half), (one | fm, _pack(fmt, 0, B - P + 1, 0))]
    # every alignment into the subnormals
    for k in range(M):
        pairs += [(min_normal, 1 << k), (min_normal, (1 << k) | neg), (_pack(fmt, 0, 2, fm), (1 << k) | neg)]
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    a, b = a + b, b + a
    a, b = a + [x ^ neg for x in a], b + [x ^ neg for x in b]
    return np.array(a, dtype=fmt.dtype), np.array(b, dtype=fmt.dtype)


def random_operands(fmt, n, rng):
    """``n`` biased random bit patterns: exponents near the bias, at the extremes (zeros, subnormals,
    the largest binade, infinities, NaNs), and significands with runs of ones and zeros."""
    fmt = get_format(fmt)
    P, M, EM = fmt.precision, fmt.frac_bits, fmt.exp_max_field
    s = rng.integers(0, 2, n)
    e = rng.integers(0, EM + 1, n)
    pick = rng.random(n)
    e = np.where(pick < 0.35, rng.integers(max(fmt.bias - P - 3, 0), min(fmt.bias + P + 3, EM), n), e)
    e = np.where((pick >= 0.35) & (pick < 0.45), rng.integers(0, 3, n), e)
    e = np.where((pick >= 0.45) & (pick < 0.5), rng.integers(EM - 2, EM + 1, n), e)
    f = rng.integers(0, 1 << M, n)
    runs = rng.random(n)
    width = rng.integers(0, M + 1, n)
    ones = (np.int64(1) << width) - 1
    f = np.where(runs < 0.15, ones, f)
    f = np.where((runs >= 0.15) & (runs < 0.3), fmt.frac_mask ^ ones, f)
    f = np.where((runs >= 0.3) & (runs < 0.35), 0, f)
    return ((s << (fmt.width - 1)) | (e << M) | f).astype(fmt.dtype)


def random_pairs(fmt, n, seed=0):
    """``n`` biased random pairs: independent operands, and pairs built to cancel (same exponent or
    one apart, opposite signs) or to align at every shift up to beyond the significand."""
    fmt = get_format(fmt)
    rng = np.random.default_rng(seed)
    a = random_operands(fmt, n, rng).astype(np.int64)
    b = random_operands(fmt, n, rng).astype(np.int64)
    kind = rng.random(n)
    ea = (a >> fmt.frac_bits) & fmt.exp_max_field
    shift = rng.integers(0, fmt.precision + 4, n)
    eb = np.where(kind < 0.3, ea - rng.integers(0, 2, n), ea - shift).clip(0, fmt.exp_max_field)
    frac = np.where(rng.random(n) < 0.5, a & fmt.frac_mask, rng.integers(0, 1 << fmt.frac_bits, n))
    sign = np.where(rng.random(n) < 0.7, (a ^ fmt.sign_mask) & fmt.sign_mask, a & fmt.sign_mask)
    related = sign | (eb << fmt.frac_bits) | frac
    b = np.where(kind < 0.6, related & ((1 << fmt.width) - 1), b)
    return a.astype(fmt.dtype), b.astype(fmt.dtype)


def spanning_operands(fmt, count=256, seed=0):
    """``count`` distinct operands spanning every exponent of ``fmt`` (both signs, zeros, subnormals,
    infinities, NaNs), with significands at the edges (0, 1, all ones, one half) and random ones."""
    fmt = get_format(fmt)
    rng = np.random.default_rng(seed)
    fm = fmt.frac_mask
    base = {0, fmt.sign_mask, fmt.inf, fmt.inf | fmt.sign_mask, fmt.canonical_nan, _pack(fmt, 0, fmt.exp_max_field, 1)}
    exps = list(range(fmt.exp_max_field))
    fracs = [0, 1, fm, 1 << (fmt.frac_bits - 1), fm ^ 1]
    out = set(base)
    i = 0
    while len(out) < count:
        e = exps[i % len(exps)]
        f = fracs[(i // len(exps)) % len(fracs)] if i < 2 * len(exps) else int(rng.integers(0, fm + 1))
        s = (i // 2) % 2
        out.add(_pack(fmt, s, e, f))
        i += 1
    return np.array(sorted(out)[:count], dtype=fmt.dtype)
