"""Building blocks shared by the floating-point datapaths: a clock-enabled register helper, a tree
leading-zero counter and a thermometer mask.

A datapath is written as straight-line combinational steps; between two steps it calls
:meth:`Pipeline.boundary` with the values that are still needed, and the boundary becomes a register
level only if the pipeline configuration selected it. Every register of a pipeline shares one clock
enable, so a whole pipeline stalls as one (backpressure) and otherwise accepts one input per clock.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value
from amaranth.utils import ceil_log2

__all__ = ["stream_pipeline", "Pipeline", "choose_cuts", "lzc", "thermometer"]


def choose_cuts(stages, priority, what):
    """The set of boundaries that get a register when ``stages`` registers are wanted.

    ``priority`` lists every boundary, most useful first; ``stages`` of them are taken.
    """
    if not isinstance(stages, int) or isinstance(stages, bool):
        raise TypeError(f"{what}: the number of pipeline stages must be an integer, not {stages!r}")
    if not 0 <= stages <= len(priority):
        raise ValueError(f"{what}: the number of pipeline stages must be between 0 and {len(priority)}, "
                         f"not {stages}")
    return frozenset(priority[:stages])


class Pipeline:
    """Registers, all clocked in ``domain`` under the clock enable ``en`` (``None``: always enabled)."""

    def __init__(self, m, en=None, domain="sync"):
        self.m = m
        self.en = en
        self.domain = domain

    def reg(self, value, name, reset_less=True):
        """A register of ``value``. Data registers have no reset (they are qualified by a valid bit
        that has one), which keeps the reset net small."""
        value = Value.cast(value)
        sig = Signal(value.shape(), name=name, reset_less=reset_less)
        stmt = sig.eq(value)
        if self.en is None:
            self.m.d[self.domain] += stmt
        else:
            with self.m.If(self.en):
                self.m.d[self.domain] += stmt
        return sig

    def wire(self, value, name):
        """``value`` through a named combinational signal.

        Amaranth walks expressions as trees, so a value used several times downstream is named once
        here to keep the expressions (and the generated Verilog) small.
        """
        value = Value.cast(value)
        sig = Signal(value.shape(), name=name)
        self.m.d.comb += sig.eq(value)
        return sig

    def boundary(self, values, cut, prefix):
        """``values`` (a dict of Values) registered when ``cut`` is true, else through named wires."""
        if not cut:
            return {key: self.wire(value, f"{prefix}_{key}") for key, value in values.items()}
        return {key: self.reg(value, f"{prefix}_{key}") for key, value in values.items()}

    def delay(self, value, cycles, name, reset_less=True):
        """``value`` delayed by ``cycles`` enabled clocks."""
        for k in range(cycles):
            value = self.reg(value, f"{name}_d{k}", reset_less=reset_less)
        return Value.cast(value)


def lzc(value):
    """Leading zero count of ``value`` (MSB first): ``(count, all_zero)``.

    Two levels, for depth: every group of 4 bits gives its own 2-bit count and a zero flag; the first
    non-zero group (a one-hot select from the zero flags) provides the upper bits of the count
    (OR of the selected group indices) and its own count the lower two. ``count`` has
    ceil_log2(width) bits (at least 2) and is meaningful only when ``all_zero`` is 0.
    """
    value = Value.cast(value)
    width = len(value)
    padded = max(4, 1 << ceil_log2(max(width, 1)))
    bits = Cat(Const(0, padded - width), value)      # zeros below the LSB: same leading zeros
    groups = padded // 4
    zeros, counts = [], []
    for g in range(groups):                           # g = 0 is the most significant group
        nib = bits[padded - 4 * (g + 1):padded - 4 * g]
        zeros.append(nib == 0)
        counts.append(Mux(nib[3], 0, Mux(nib[2], 1, Mux(nib[1], 2, 3)))[:2])
    hi_bits = ceil_log2(groups)
    hi = Const(0, max(hi_bits, 1))
    lo = Const(0, 2)
    for g in range(groups):
        first = ~zeros[g]
        for h in range(g):
            first = first & zeros[h]
        if hi_bits:
            hi = hi | Mux(first, g, 0)
        lo = lo | Mux(first, counts[g], 0)
    all_zero = Cat(*zeros).all()
    if not hi_bits:
        return lo, all_zero
    return Cat(lo, hi[:hi_bits]), all_zero


def thermometer(amount, width):
    """A ``width``-bit mask whose bit i is set when ``amount > i``."""
    amount = Value.cast(amount)
    return Cat(*(amount > i for i in range(width)))


def stream_pipeline(m, i, o, backpressure):
    """A :class:`Pipeline` between streams ``i`` and ``o``: with ``backpressure`` the whole pipeline
    advances when ``o`` can take a result (``i.ready`` follows); without, it always advances."""
    if backpressure:
        enable = ~o.valid | o.ready
        m.d.comb += i.ready.eq(enable)
    else:
        enable = None
        m.d.comb += i.ready.eq(1)
    return Pipeline(m, enable)
