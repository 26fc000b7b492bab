"""The golden model (netreduce.sim.fp) against independent references: numpy's float16 and float32
conversions and additions (correctly rounded), exact rational arithmetic, and the tree's definition."""

from fractions import Fraction

import numpy as np
import pytest

from netreduce.sim import fp

FORMATS = ["fp32", "bf16", "fp16"]


def exact_value(fmt, bits):
    fmt = fp.get_format(fmt)
    v = fp.to_float64(fmt, np.array([bits], dtype=fmt.dtype))[0]
    return Fraction(v)


def ref_round(fmt, value):
    """Round a Fraction to the nearest fmt value, ties to even, by searching the neighbours."""
    fmt = fp.get_format(fmt)
    if value == 0:
        return None
    mag = abs(value)
    max_finite = exact_value(fmt, fmt.inf - 1)
    ulp_max = exact_value(fmt, fmt.inf - 1) - exact_value(fmt, fmt.inf - 2)
    if mag >= max_finite + ulp_max / 2:
        return fmt.inf | (fmt.sign_mask if value < 0 else 0)
    lo, hi = 0, fmt.inf - 1
    while lo < hi:                      # largest pattern with value <= mag
        mid = (lo + hi + 1) // 2
        if exact_value(fmt, mid) <= mag:
            lo = mid
        else:
            hi = mid - 1
    cand = lo
    below, above = exact_value(fmt, cand), exact_value(fmt, cand + 1) if cand + 1 < fmt.inf else None
    if above is not None and (mag - below > above - mag or (mag - below == above - mag and cand & 1)):
        cand += 1
    return cand | (fmt.sign_mask if value < 0 else 0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_add_corner_cases_exact(fmt):
    """Every corner pair against exact rational arithmetic rounded by search (not by the model)."""
    f = fp.get_format(fmt)
    a, b = fp.corner_pairs(f)
    got = fp.add(f, a, b)
    for x, y, r in zip(a.tolist(), b.tolist(), got.tolist(), strict=True):
        xa, ya = fp.to_float64(f, np.array([x, y], dtype=f.dtype))
        if np.isnan(xa) or np.isnan(ya) or (np.isinf(xa) and np.isinf(ya) and xa != ya):
            assert r == f.canonical_nan
            continue
        if np.isinf(xa) or np.isinf(ya):
            assert r == (x if np.isinf(xa) else y)
            continue
        s = Fraction(xa) + Fraction(ya)
        if s == 0:
            expect = f.sign_mask if (x & f.sign_mask and y & f.sign_mask) else 0
        else:
            expect = ref_round(f, s)
        assert r == expect, f"{x:#x} + {y:#x}: {r:#x} != {expect:#x}"


def test_fp16_add_against_numpy():
    rng = np.random.default_rng(11)
    a = rng.integers(0, 1 << 16, 200_000).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 200_000).astype(np.uint16)
    with np.errstate(all="ignore"):
        ref = (a.view(np.float16).astype(np.float64) + b.view(np.float16).astype(np.float64))
        ref = ref.astype(np.float16).view(np.uint16)
    assert np.array_equal(fp.add("fp16", a, b), fp.canonicalize("fp16", ref))


@pytest.mark.parametrize("fmt", ["fp16", "fp32"])
def test_rounder_against_numpy_conversion(fmt):
    f = fp.get_format(fmt)
    rng = np.random.default_rng(5)
    x = np.ldexp(rng.random(300_000) + 0.5, rng.integers(-170, 140, 300_000)) * rng.choice([-1, 1], 300_000)
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16 if fmt == "fp16" else np.float32).view(f.dtype)
    assert np.array_equal(fp.from_float64(f, x), ref)


def test_bf16_rounding_against_fraction():
    rng = np.random.default_rng(8)
    x = np.ldexp(rng.random(2000) + 0.5, rng.integers(-140, 130, 2000)) * rng.choice([-1, 1], 2000)
    got = fp.from_float64("bf16", x)
    for v, g in zip(x.tolist(), got.tolist(), strict=True):
        assert g == ref_round("bf16", Fraction(v))


@pytest.mark.parametrize("fmt", FORMATS)
def test_ftz(fmt):
    f = fp.get_format(fmt)
    sub = np.array([1, f.frac_mask, 1 | f.sign_mask], dtype=f.dtype)
    one = fp._pack(f, 0, f.bias, 0)
    zeros = (sub & f.sign_mask).astype(f.dtype)     # zeros of the same signs: -0 + -0 = -0
    assert np.array_equal(fp.add(f, sub, zeros, ftz=True), np.array([0, 0, f.sign_mask], f.dtype))
    assert np.array_equal(fp.add(f, sub, np.zeros(3, f.dtype), ftz=True), np.zeros(3, f.dtype))
    assert np.array_equal(fp.add(f, sub, np.zeros(3, f.dtype)), np.array([1, f.frac_mask, 1 | f.sign_mask], f.dtype))
    # normal - normal into the subnormals flushes to zero of the result's sign
    a = np.array([fp._pack(f, 0, 1, 1)], f.dtype)
    b = np.array([fp._pack(f, 1, 1, 0)], f.dtype)
    assert fp.add(f, a, b, ftz=True)[0] == 0
    assert fp.add(f, a ^ f.sign_mask, b ^ f.sign_mask, ftz=True)[0] == f.sign_mask
    assert fp.add(f, np.array([one], f.dtype), np.array([1], f.dtype), ftz=True)[0] == one


def test_ftz_root_rounding_is_after_rounding():
    # a binary32 value just below the smallest normal binary16 that rounds up to it at 11 bits
    fmt = fp.FP16
    x = 2.0 ** -14 * (1 - 2.0 ** -12)          # rounds to 2**-14 with unbounded exponent
    y = 2.0 ** -14 * (1 - 2.0 ** -11)          # rounds (unbounded) to 1.1111111111b * 2**-15: tiny
    bits = fp.from_float64(fp.FP32, np.array([x, y, -y]))
    out = fp.narrow_from_fp32(fmt, bits, ftz=True)
    assert out.tolist() == [0x0400, 0, 0x8000]
    assert fp.narrow_from_fp32(fmt, bits).tolist() == [0x0400, 0x0400, 0x8400]


def ref_tree(fmt, contributions, mask, ftz):
    """The tree by its definition, recursively, on Python ints (one lane)."""
    f = fp.get_format(fmt)
    n = len(contributions)
    vals = []
    for c, m in zip(contributions, mask, strict=True):
        if not m:
            vals.append(None)
            continue
        if ftz:
            c = int(fp.flush_subnormal(f, np.array([c], f.dtype))[0])
        vals.append(int(fp.widen_to_fp32(f, np.array([c], f.dtype))[0]) if f is not fp.FP32 else c)
    size = 1
    while size < n:
        size *= 2
    vals += [None] * (size - n)

    def node(lo, hi):
        if hi - lo == 1:
            return vals[lo]
        mid = (lo + hi) // 2
        left, right = node(lo, mid), node(mid, hi)
        if left is None:
            return right
        if right is None:
            return left
        return int(fp.add(fp.FP32, np.array([left], np.uint32), np.array([right], np.uint32), ftz)[0])

    root = node(0, size)
    if root is None:
        root = 0
    if f is fp.FP32:
        return int(fp.canonicalize(f, np.array([root], np.uint32))[0])
    return int(fp.narrow_from_fp32(f, np.array([root], np.uint32), ftz)[0])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ftz", [False, True])
def test_tree_sum_definition(fmt, ftz):
    f = fp.get_format(fmt)
    rng = np.random.default_rng(3)
    for n in range(1, 11):
        c = fp.random_operands(f, n * 40, rng).reshape(n, 40)
        mask = rng.random((n, 40)) < 0.7
        got = fp.tree_sum(f, c, mask, ftz)
        for lane in range(40):
            assert got[lane] == ref_tree(f, c[:, lane].tolist(), mask[:, lane].tolist(), ftz)


def test_tree_sum_semantics():
    one = 0x3F800000
    # all absent: +0; one present: itself (even -0), pairs (0,1),(2,3) then the pair of pairs
    assert fp.tree_sum("fp32", np.array([[one], [one]], np.uint32), [False, False])[0] == 0
    assert fp.tree_sum("fp32", np.array([[0x80000000], [one]], np.uint32), [True, False])[0] == 0x80000000
    # 2**24 + 1 rounds to 2**24 (a tie, to even) and 1 - 2**24 is exact: the tree gives 1, where a
    # sequential sum ((2**24 + 1) + 1) - 2**24 would give 0
    big = 0x4B800000
    c = np.array([[big], [one], [one], [big | 0x80000000]], np.uint32)
    assert fp.tree_sum("fp32", c)[0] == one
    # input 2 absent: node (2,3) is input 3 unchanged
    assert fp.tree_sum("fp32", c, [True, True, False, True])[0] == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_tree_sum_without_mask_is_the_definition(fmt):
    # no mask and no flushing takes the model's fast path (numpy binary32 a level at a time)
    f = fp.get_format(fmt)
    rng = np.random.default_rng(4)
    for n in range(1, 12):
        c = fp.random_operands(f, n * 60, rng).reshape(n, 60)
        got = fp.tree_sum(f, c)
        for lane in range(60):
            assert got[lane] == ref_tree(f, c[:, lane].tolist(), [True] * n, False)
