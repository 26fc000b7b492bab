"""Loss of bounded-loss gradient packets at a target rate: in MLT's drop order, or blind to class.

MLT drops gradient packets under pressure in the order of their class (:mod:`netreduce.host.classify`):
front-layer before back-layer, small-magnitude before large-magnitude, lowest *drop level* first. A
:class:`ContributionDrops` emulates the outcome of that order, not the queues that produce it: it is a
:class:`~netreduce.host.faults.FaultSpec` ``select`` function for the host-to-switch side of the emulated
network (:func:`netreduce.host.network.build_allreduce`'s ``faults_up``) that drops a target fraction
``rate`` of each worker's contributions, chosen by policy.

Rules
-----
- A *contribution* is a bounded-loss gradient packet: a RoCE v2 UC RDMA WRITE ONLY with immediate from
  the IPv4 address of a worker that :meth:`ContributionDrops.plan` was given. Only contributions are
  dropped; every other frame (credit and result requests, anything else) passes, and so does everything
  the switch sends (results, credits), which does not go through ``faults_up``.
- A contribution's *drop level* is :meth:`ClassMap.drop_level` of the class its DSCP decodes to with the
  worker's class map (a DSCP of no bounded-loss class is never dropped).
- :attr:`DropPolicy.MLT`: per worker, with ``n`` contributions of which ``n_l`` are on level ``l``, levels
  are taken lowest first: a level wholly below the target (``rate * n`` packets) is dropped with
  probability 1, the level the target falls in with the probability that makes the expected count exactly
  ``rate * n``, the levels above it not at all. :attr:`DropPolicy.UNIFORM`: every contribution with
  probability ``rate``, what a network blind to the classes does. Either way each contribution is an
  independent draw from a generator seeded by ``seed``, so that a worker's expected dropped fraction is
  ``rate`` and the same seed, workers and traffic give the same drops.
- ``sent`` and ``dropped`` count the contributions by drop level.
"""

import enum
import random
from collections import Counter

from netreduce.host.faults import FaultSpec
from netreduce.host.lossy import LossyWorker
from netreduce.host.protocol import ip_to_int
from netreduce.sim.roce_model import parse_frame
from netreduce.wire import UC_WRITE_OPCODES

__all__ = ["DropPolicy", "ContributionDrops", "level_drop_probabilities"]

CONTRIBUTION_OPCODE = UC_WRITE_OPCODES["ONLY_WITH_IMMEDIATE"]


class DropPolicy(enum.Enum):
    """Which contributions go first."""
    MLT = "mlt"                 # lowest drop level first (front layers, small magnitudes)
    UNIFORM = "uniform"         # any, alike


def level_drop_probabilities(levels, rate):
    """``{level: probability}`` of :attr:`DropPolicy.MLT` for one worker whose contributions are on drop
    ``levels`` (one entry per contribution): lowest levels first, expected count ``rate * len(levels)``."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"drop rate {rate} is not a fraction between 0 and 1")
    counts = Counter(levels)
    remaining = rate * len(levels)
    probabilities = {}
    for level in sorted(counts):
        taken = min(remaining, counts[level])
        probabilities[level] = taken / counts[level]
        remaining -= taken
    return probabilities


class ContributionDrops:
    """Drops ``rate`` of each worker's contributions under ``policy`` (module docstring); :attr:`spec` is the
    :class:`FaultSpec` to give the network's host-to-switch side, :meth:`plan` must see the workers before
    the network runs."""

    def __init__(self, rate, policy=DropPolicy.MLT, *, seed=0):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"drop rate {rate} is not a fraction between 0 and 1")
        self.rate = rate
        self.policy = DropPolicy(policy)
        self.random = random.Random(f"contribution drops:{seed}")
        self.sent, self.dropped = Counter(), Counter()
        self._workers = {}          # source IPv4 address -> (its class map, {DSCP: (drop level, probability)})

    @property
    def spec(self):
        return FaultSpec(select=self)

    def plan(self, workers):
        """Take the drop levels of every :class:`LossyWorker` of ``workers`` (by the DSCPs of its messages)."""
        for worker in workers:
            if not isinstance(worker, LossyWorker):
                raise ValueError("contribution drops apply to bounded-loss workers only")
            levels = {}
            for dscp in set(worker.dscp):
                traffic_class = worker.class_map.decode(dscp)
                if traffic_class is not None and not traffic_class.reliable:
                    levels[dscp] = worker.class_map.drop_level(traffic_class.group, traffic_class.bucket)
            if self.policy is DropPolicy.MLT:
                probability = level_drop_probabilities([levels[d] for d in worker.dscp if d in levels], self.rate)
            else:
                probability = dict.fromkeys(levels.values(), self.rate)
            self._workers[ip_to_int(worker.host.ip)] = {dscp: (level, probability[level])
                                                        for dscp, level in levels.items()}

    def __call__(self, index, frame):
        """The fault for the ``index``-th frame out of a host: ``"loss"`` or ``None``."""
        h = parse_frame(frame).header
        if not h["roce"] or h["bth_opcode"] != CONTRIBUTION_OPCODE or h["ip_version"] != 4:
            return None
        classes = self._workers.get(h["ip_src"])
        if classes is None or h["ip_dscp"] not in classes:
            return None
        level, probability = classes[h["ip_dscp"]]
        self.sent[level] += 1
        if self.random.random() < probability:
            self.dropped[level] += 1
            return "loss"
        return None

    @property
    def dropped_fraction(self):
        """The contributions dropped, as a fraction of those sent (0 before any)."""
        sent = sum(self.sent.values())
        return sum(self.dropped.values()) / sent if sent else 0.0
