"""IEEE 754 adders and the deterministic adder tree (see docs/ARCHITECTURE.md, "Floating point").

The bit-exact golden model is :mod:`netreduce.sim.fp`.
"""

from .adder import ADDER_BOUNDARIES, MAX_ADDER_STAGES, FPAdder, adder_datapath
from .convert import NARROW_BOUNDARIES, narrow_datapath, widen
from .tree import MAX_INPUTS, AdderTree

__all__ = ["FPAdder", "AdderTree", "adder_datapath", "narrow_datapath", "widen", "ADDER_BOUNDARIES",
           "MAX_ADDER_STAGES", "NARROW_BOUNDARIES", "MAX_INPUTS"]
