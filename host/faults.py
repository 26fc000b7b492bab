"""Fault injection at a chosen point of the network: loss, duplication, reordering, corruption.

A :class:`FaultInjector` sits on one link direction (for example host 2 to switch) and decides, frame by
frame, what happens to it: by rate (each fault an independent draw from a seeded generator) and by exact
frame (``exact={index: fault}``, counting the frames that passed this point from 0, or a ``select``
function of the index and the frame). The same seed and the same frames give the same faults.

- ``loss``: the frame disappears.
- ``duplicate``: a second copy follows the first, ``duplicate_delay_ns`` later.
- ``reorder``: the frame is held back by ``reorder_delay_ns``, so that later frames overtake it.
- ``corrupt``: one bit is flipped in a RoCE frame's BTH, extension headers, payload or ICRC, where the
  ICRC catches it (this is damage done after the Ethernet FCS was checked, the case the ICRC exists for;
  a frame damaged on the wire is dropped by the receiving MAC, which is ``loss``). Frames that are not
  RoCE v2 are left intact.
"""

import random
from collections import Counter
from dataclasses import dataclass, field

from netreduce.sim.roce_model import parse_frame

__all__ = ["FaultSpec", "FaultInjector", "FAULTS"]

FAULTS = ("loss", "duplicate", "reorder", "corrupt")


@dataclass(frozen=True)
class FaultSpec:
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    exact: dict = field(default_factory=dict)     # frame index at this point -> one of FAULTS
    select: object = None                          # callable(index, frame) -> one of FAULTS or None
    reorder_delay_ns: int = 5_000
    duplicate_delay_ns: int = 100

    def __post_init__(self):
        for name in ("loss", "duplicate", "reorder", "corrupt"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} rate {rate} is not a probability")
        for index, fault in self.exact.items():
            if fault not in FAULTS:
                raise ValueError(f"frame {index}: unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")

    @property
    def active(self):
        return bool(self.loss or self.duplicate or self.reorder or self.corrupt or self.exact or self.select)


class FaultInjector:
    """Applies a :class:`FaultSpec` to the frames passing one point. ``counts`` tells what it did."""

    def __init__(self, spec=None, *, seed=0, name=""):
        self.spec = spec or FaultSpec()
        self.name = name
        self.random = random.Random(f"{seed}:{name}")
        self.counts = Counter()
        self.index = 0
        self.last = None        # the fault done to the last frame, or None

    def apply(self, frame):
        """``[(extra delay in ns, frame), ...]``: what continues, and how much later than planned."""
        spec, index = self.spec, self.index
        self.index += 1
        self.last = None
        if not spec.active:
            return [(0, frame)]
        fault = spec.exact.get(index)
        if fault is None and spec.select is not None:
            fault = spec.select(index, frame)
            if fault is not None and fault not in FAULTS:
                raise ValueError(f"select returned unknown fault {fault!r}")
        if fault is None:
            # one draw per kind, always all four, so that a rate change does not shift the other faults
            draws = [self.random.random() for _ in FAULTS]
            for kind, draw in zip(FAULTS, draws, strict=True):
                if draw < getattr(spec, kind):
                    fault = kind
                    break
        if fault is None:
            return [(0, frame)]
        if fault == "corrupt":
            damaged = self._corrupt(frame)
            if damaged is None:
                return [(0, frame)]
            self.counts["corrupt"] += 1
            self.last = "corrupt"
            return [(0, damaged)]
        self.counts[fault] += 1
        self.last = fault
        if fault == "loss":
            return []
        if fault == "duplicate":
            return [(0, frame), (spec.duplicate_delay_ns, frame)]
        return [(spec.reorder_delay_ns, frame)]

    def _corrupt(self, frame):
        parsed = parse_frame(frame)
        h = parsed.header
        if not h["roce"] or not parsed.verdict["len_ok"]:
            return None
        l3 = 14 + 4 * h["vlan_valid"]
        bth = l3 + (20 if h["ip_version"] == 4 else 40) + 8
        end = l3 + h["ip_len"] + (0 if h["ip_version"] == 4 else 40)
        # the BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC: never pick it
        candidates = [i for i in range(bth, end) if i != bth + 4]
        position = self.random.choice(candidates)
        damaged = bytearray(frame)
        damaged[position] ^= 1 << self.random.randrange(8)
        return bytes(damaged)
