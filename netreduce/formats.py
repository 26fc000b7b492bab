"""The element formats (binary32, bfloat16, binary16), defined once for the RTL (``netreduce.hw.fp``), the
golden model (``netreduce.sim.fp``) and the tests: field widths, bias, canonical NaN."""

from dataclasses import dataclass

import numpy as np

__all__ = ["Format", "FORMATS", "FP32", "BF16", "FP16", "get_format"]


@dataclass(frozen=True)
class Format:
    name: str
    exp_bits: int
    frac_bits: int
    canonical_nan: int

    @property
    def width(self):
        return 1 + self.exp_bits + self.frac_bits

    @property
    def bias(self):
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emin(self):
        return 1 - self.bias

    @property
    def precision(self):
        return self.frac_bits + 1

    @property
    def exp_max_field(self):
        return (1 << self.exp_bits) - 1

    @property
    def sign_mask(self):
        return 1 << (self.width - 1)

    @property
    def abs_mask(self):
        return self.sign_mask - 1

    @property
    def frac_mask(self):
        return (1 << self.frac_bits) - 1

    @property
    def inf(self):
        return self.exp_max_field << self.frac_bits

    @property
    def dtype(self):
        return np.uint32 if self.width == 32 else np.uint16

    def __str__(self):
        return self.name


FP32 = Format("fp32", 8, 23, 0x7FC00000)
BF16 = Format("bf16", 8, 7, 0x7FC0)
FP16 = Format("fp16", 5, 10, 0x7E00)
FORMATS = {f.name: f for f in (FP32, BF16, FP16)}
_ALIASES = {"binary32": "fp32", "float32": "fp32", "bfloat16": "bf16", "binary16": "fp16", "float16": "fp16"}


def get_format(fmt):
    """A :class:`Format` from itself or its name (fp32, bf16, fp16 or binary32, bfloat16, binary16)."""
    if isinstance(fmt, Format):
        return fmt
    name = _ALIASES.get(str(fmt).lower(), str(fmt).lower())
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown floating-point format {fmt!r}; choose one of "
                         f"{', '.join(FORMATS)}") from None
