"""The egress stage's traffic classes and default configuration, defined once for the RTL
(``netreduce.hw.egress``), its model (``netreduce.sim.egress_model``) and the register map.

Every frame that enters the egress stage carries its IPv4 DSCP and a ``lossy`` bit (docs/ARCHITECTURE.md,
"Egress stage (MLT)"). The DSCP picks one of :data:`CLASSES` classes (table ``dscp_class``, 64 entries); the
class gives the frame's priority queue, whether it may be dropped, and its drop threshold (table
``class_table``). A frame is *droppable* only when both its ``lossy`` bit (set by the switch, which knows that
the frame belongs to the bounded-loss class of a registered job) and its class's ``droppable`` bit are set: a
host cannot make any other frame droppable by marking it.

Default map (what the host library's ``ClassMap.default()`` marks, ``netreduce.host.classify``):

=================  ===================  =====================  ==========  =====================================
class              DSCP                 queue (of Q)           droppable   threshold (beats of occupancy)
=================  ===================  =====================  ==========  =====================================
``4 g + b``        ``32 + 4 g + b``     ``g * Q // 4``         yes         ``threshold_of_level(g + b)``
RELIABLE (16)      26 (AF31)            0                      no          (none)
CONTROL (17)       48 (CS6), 56 (CS7)   0                      no          (none)
OTHER (18)         every other DSCP     Q - 1                  no          (none)
=================  ===================  =====================  ==========  =====================================

``g`` is the layer group (0 the front layers, 3 the back) and ``b`` the magnitude bucket (0 the smallest
quartile, 3 the largest); ``g + b`` is the class's *drop level*: level 0 (front, small) has the lowest
threshold and is dropped first, level 6 (back, large) the highest and is dropped last. The thresholds of the
seven levels are spread evenly over the buffer that is left once a largest frame is set aside:
``threshold_of_level(L) = (L + 2) * (depth_beats - max_frame_beats) // 9`` (2/9 to 8/9 of it).
Front layers go to the highest queues (the next forward pass needs them first), the reliable class and the
switch's control frames share queue 0 with them (their volume is bounded by the credits), and traffic of no
class goes to the lowest queue.
"""

from dataclasses import dataclass
from functools import cache

from amaranth.lib import enum

from .wire import CONTROL_DSCP

__all__ = [
    "DSCPS", "LAYER_GROUPS", "MAGNITUDE_BUCKETS", "DROP_LEVELS", "LOSSY_CLASSES", "RELIABLE_CLASS",
    "CONTROL_CLASS", "OTHER_CLASS", "CLASSES", "RELIABLE_DSCP", "CONTROL_DSCPS", "QUANTUM_LIMIT", "MAX_QUEUES",
    "MAX_DEPTH_BEATS",
    "Scheduling", "DropReason", "ClassEntry", "lossy_class", "lossy_dscp", "drop_level", "threshold_of_level",
    "queue_of_group", "default_dscp_classes", "default_class_table", "default_quanta", "frame_dscp",
    "default_class_of_frame", "default_queue_of_frame",
]

DSCPS = 64
LAYER_GROUPS = 4
MAGNITUDE_BUCKETS = 4
DROP_LEVELS = LAYER_GROUPS + MAGNITUDE_BUCKETS - 1
LOSSY_CLASSES = LAYER_GROUPS * MAGNITUDE_BUCKETS
RELIABLE_CLASS = LOSSY_CLASSES          # 16
CONTROL_CLASS = LOSSY_CLASSES + 1       # 17
OTHER_CLASS = LOSSY_CLASSES + 2         # 18
CLASSES = LOSSY_CLASSES + 3             # 19
RELIABLE_DSCP = 26                      # AF31: lossless RoCE traffic in NVIDIA's RoCE configurations
CONTROL_DSCPS = (CONTROL_DSCP, 56)      # CS6, CS7: network control (the switch's CREDIT frames: CS6)
QUANTUM_LIMIT = (1 << 16) - 1           # a DRR quantum is 16 bits (beats)
MAX_QUEUES = 16                         # priority queues of one egress stage, at most
MAX_DEPTH_BEATS = 1 << 20               # an egress stage's buffer, at most (beats)


class Scheduling(enum.Enum, shape=1):
    """How the egress stage chooses the next frame among its queues."""
    STRICT = 0          # the lowest-numbered queue with a frame
    WEIGHTED = 1        # deficit round robin in beats, quanta per queue


class DropReason(enum.Enum, shape=2):
    """Why admission dropped a frame."""
    NONE = 0
    THRESHOLD = 1       # droppable, and the buffer's occupancy was at or above its class's threshold
    FULL = 2            # droppable, and a largest frame would not have fit
    OVERSIZE = 3        # longer than max_frame: never sent, whatever its class


@dataclass(frozen=True)
class ClassEntry:
    """One class: its priority queue (0 the highest), whether its frames may be dropped, and the buffer
    occupancy (beats) at or above which a droppable frame of it is dropped."""
    queue: int
    droppable: bool
    threshold: int


def _check_group_bucket(group, bucket):
    if not 0 <= group < LAYER_GROUPS or not 0 <= bucket < MAGNITUDE_BUCKETS:
        raise ValueError(f"(layer group, magnitude bucket) must be in (0..{LAYER_GROUPS - 1}, "
                         f"0..{MAGNITUDE_BUCKETS - 1}), not ({group!r}, {bucket!r})")


def lossy_class(group, bucket):
    """The class of bounded-loss frames of layer group ``group`` and magnitude bucket ``bucket``."""
    _check_group_bucket(group, bucket)
    return group * MAGNITUDE_BUCKETS + bucket


def lossy_dscp(group, bucket):
    """The default DSCP of bounded-loss class ``(group, bucket)``: ``0b10_gg_bb``."""
    _check_group_bucket(group, bucket)
    return 32 + group * MAGNITUDE_BUCKETS + bucket


def drop_level(group, bucket):
    """The default drop level of bounded-loss class ``(group, bucket)``: 0 is dropped first."""
    _check_group_bucket(group, bucket)
    return group + bucket


def threshold_of_level(level, depth_beats, max_frame_beats):
    """The default threshold (beats of occupancy) of drop level ``level`` (module docstring)."""
    return (level + 2) * (depth_beats - max_frame_beats) // (DROP_LEVELS + 2)


def queue_of_group(group, queues):
    """The default queue of layer group ``group``: the groups spread over the ``queues`` queues, front first."""
    return group * queues // LAYER_GROUPS


@cache
def default_dscp_classes():
    """The default ``dscp_class`` table: the class of each DSCP 0..63."""
    table = [OTHER_CLASS] * DSCPS
    for group in range(LAYER_GROUPS):
        for bucket in range(MAGNITUDE_BUCKETS):
            table[lossy_dscp(group, bucket)] = lossy_class(group, bucket)
    table[RELIABLE_DSCP] = RELIABLE_CLASS
    for dscp in CONTROL_DSCPS:
        table[dscp] = CONTROL_CLASS
    return tuple(table)


@cache
def default_class_table(queues, depth_beats, max_frame_beats):
    """The default ``class_table``: one :class:`ClassEntry` per class. A class that is never dropped gets
    ``depth_beats`` as its threshold (which is never reached)."""
    never = ClassEntry(0, False, depth_beats)
    table = [never] * CLASSES
    for group in range(LAYER_GROUPS):
        for bucket in range(MAGNITUDE_BUCKETS):
            threshold = threshold_of_level(drop_level(group, bucket), depth_beats, max_frame_beats)
            table[lossy_class(group, bucket)] = ClassEntry(queue_of_group(group, queues), True, threshold)
    table[OTHER_CLASS] = ClassEntry(queues - 1, False, depth_beats)
    return tuple(table)


def default_quanta(queues, max_frame_beats):
    """The default DRR quanta: every queue the same, a largest frame (so that a queue with a frame waiting
    is always served within one round)."""
    return (min(max_frame_beats, QUANTUM_LIMIT),) * queues


def frame_dscp(frame):
    """The DSCP the switch gives a frame it sends to the egress stage, read from the frame's bytes: the
    IPv4 DSCP (ethertype 0x0800, after one 802.1Q tag if any, with a first byte of 0x45: the frames whose
    IPv4 header the parser reads), the IPv6 traffic class's DSCP bits (0x86DD, version 6), 0 otherwise."""
    at = 14
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == 0x8100:
        ethertype, at = int.from_bytes(frame[16:18], "big"), 18
    if ethertype == 0x0800 and len(frame) > at + 1 and frame[at] == 0x45:
        return frame[at + 1] >> 2
    if ethertype == 0x86DD and len(frame) > at + 1 and frame[at] >> 4 == 6:
        return ((frame[at] & 0x0F) << 2) | (frame[at + 1] >> 6)
    return 0


def default_class_of_frame(frame):
    """The class the default map gives ``frame`` (by :func:`frame_dscp`)."""
    return default_dscp_classes()[frame_dscp(frame)]


def default_queue_of_frame(frame, queues):
    """The queue, of ``queues``, that the default map gives ``frame``."""
    return default_class_table(queues, 1, 0)[default_class_of_frame(frame)].queue
