"""MLT traffic classes: the DSCP a packet carries, from its gradient's layer and its magnitude.

MLT (NSDI'24, "Towards Domain-Specific Network Transport for Distributed DNN Training") rests on gradients
differing in importance: by layer (front layers, near the input, tolerate loss better and are the first
that the next forward pass needs) and by magnitude (small gradients tolerate loss better). The host marks
each packet's class in its IPv4 DSCP field, which the switch sees on every packet (the aggregation header
is on a message's first packet only); the switch's egress stage schedules and drops by it.

Classes
-------
- **Reliable**: RC aggregation traffic (the NetReduce class: every frame of a worker's RC queue pairs,
  its messages and the ACKs of its results). One DSCP of its own; the egress stage never drops it.
- **Bounded-loss** ``(group, bucket)``: single-packet messages of one layer's gradient. ``group`` is the
  layer group, 0 the front (input side) to ``layer_groups - 1`` the back; ``bucket`` the magnitude
  bucket, 0 the smallest to ``magnitude_buckets - 1`` the largest. Scheduling serves group 0 first.
  Under pressure the egress stage drops the class of the lowest *drop level* first: levels grow towards
  the back (front-layer packets are dropped before back-layer ones) and with the magnitude (small before
  large), as configured in :attr:`ClassMap.drop_levels`.
- Any other DSCP (0 in particular, what unmarked traffic carries) is of no class: never dropped by the
  egress stage, like control frames and frames of no aggregation job.

Rules
-----
- **Layer group** (:func:`layer_group`): layer ``i`` of ``L`` (a "layer" is one entry of a
  :mod:`netreduce.host.workloads` list, one parameter tensor, in forward order) is in group
  ``i * G // L``: groups of ``L / G`` consecutive layers (give or take one), front first.
- **Magnitude bucket**: a tensor is cut into packets of ``packet_elements`` consecutive elements (the
  last one shorter). A packet's magnitude is the mean absolute value of its elements (a NaN makes it
  infinite: a non-finite gradient counts as large and is the last to be dropped). The tensor's bucket
  edges are the ``k / B`` quantiles (``k = 1 .. B-1``, linear interpolation) of its packets'
  magnitudes (:func:`magnitude_edges`), so that every bucket holds as many packets as the others, give
  or take one, when the magnitudes are distinct. A packet's bucket is the number of edges below its
  magnitude (:func:`magnitude_bucket`), computed as the packet is built; it grows with the magnitude.
  Equal magnitudes share a bucket, the lower one when they sit on an edge: a tensor with many packets of
  zeros (dead units) puts them all in bucket 0, the first dropped.
- **DSCP**: :meth:`ClassMap.dscp_of` ``(group, bucket)``; :meth:`ClassMap.decode` goes back from a DSCP
  to its :class:`TrafficClass` (or ``None``), and :meth:`ClassMap.table` gives all 64 at once, what the
  egress stage's configuration is generated from.
- :func:`classify_layers` puts it together for a workload: each layer's gradient, its packets' buckets
  and DSCPs.

Default map (:meth:`ClassMap.default`)
-------------------------------------
4 layer groups x 4 magnitude buckets (quartiles); bounded-loss class ``(g, b)`` has DSCP
``0b10_gg_bb = 32 + 4 g + b`` (32..47) and drop level ``g + b`` (0: front group, smallest quartile,
dropped first; 6: back group, largest quartile, dropped last); the reliable class has DSCP 26. Why:

- DSCP 26 (AF31) is where NVIDIA's RoCE configurations put lossless RoCE traffic (priority 3, with
  CNPs at 48): RC aggregation traffic is such traffic, and a fabric set up for RoCE already trusts it.
- 32..47 is the block ``10xxxx``: the two high bits name the bounded-loss class and the four low ones
  are the group and the bucket, which a switch can take apart without a table. It holds neither 0
  (unmarked traffic), nor 26, nor 48 (CNP) or 56 (network control).
- 4 layer groups fill the 4 priority queues of the smallest egress stage; 4 buckets are quartiles, fine
  enough for the drop levels to matter and coarse enough that a bucket's edges hold on a tensor of a few
  packets.
- The drop level ``g + b`` is the simplest order that drops front before back and small before large
  with both signals weighing alike: the 16 classes fall into 7 thresholds.
"""

from dataclasses import dataclass

import numpy as np

from netreduce.sim.fp import get_format, to_float64
from netreduce.wire import AGG_HEADER_BYTES

__all__ = ["ClassMap", "TrafficClass", "RELIABLE", "LayerPackets", "layer_group", "packet_magnitudes",
           "magnitude_edges", "magnitude_bucket", "magnitude_buckets", "elements_per_packet", "split_layers",
           "classify_layers", "DSCP_LIMIT"]

DSCP_LIMIT = 64                 # DSCPs are 6 bits


@dataclass(frozen=True)
class TrafficClass:
    """A DSCP's class: the reliable class (``group`` and ``bucket`` None) or bounded-loss ``(group, bucket)``."""
    reliable: bool
    group: int | None = None
    bucket: int | None = None


RELIABLE = TrafficClass(True)


def _positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return value


def _grid(name, rows, groups, buckets):
    """``rows`` as a tuple of ``groups`` tuples of ``buckets`` integers."""
    try:
        grid = tuple(tuple(row) for row in rows)
    except TypeError:
        raise ValueError(f"{name} must be {groups} rows (layer groups) of {buckets} integers "
                         "(magnitude buckets)") from None
    if len(grid) != groups or any(len(row) != buckets for row in grid):
        raise ValueError(f"{name} must be {groups} rows (layer groups) of {buckets} integers (magnitude "
                         f"buckets), not {[len(row) for row in grid]}")
    for row in grid:
        for value in row:
            if not isinstance(value, int | np.integer) or isinstance(value, bool):
                raise ValueError(f"{name} holds {value!r}, not an integer")
    return tuple(tuple(int(value) for value in row) for row in grid)


@dataclass(frozen=True)
class ClassMap:
    """The (layer group, magnitude bucket) -> DSCP mapping and the reliable class's DSCP (module docstring).

    ``dscp[g][b]`` is the DSCP of bounded-loss class ``(g, b)`` (``None``: ``32 + b + g *
    magnitude_buckets``, the default block, which holds up to 32 classes); ``drop_levels[g][b]`` its drop
    level, 0 dropped first (``None``: ``g + b``). Rejected with a ``ValueError``: a DSCP outside 0..63;
    two classes with one DSCP (the reliable one included); a bounded-loss class on DSCP 0, the DSCP of
    unmarked traffic, which must never be dropped; a negative drop level, or one that falls from a group
    to the next (towards the back) or from a bucket to the next (towards the large), which would drop back
    before front or large before small."""
    layer_groups: int = 4
    magnitude_buckets: int = 4
    dscp: tuple[tuple[int, ...], ...] | None = None
    reliable: int = 26
    drop_levels: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self):
        groups = _positive("layer_groups", self.layer_groups)
        buckets = _positive("magnitude_buckets", self.magnitude_buckets)
        dscp = self.dscp
        if dscp is None:
            dscp = [[32 + b + g * buckets for b in range(buckets)] for g in range(groups)]
        dscp = _grid("dscp", dscp, groups, buckets)
        levels = self.drop_levels
        if levels is None:
            levels = [[g + b for b in range(buckets)] for g in range(groups)]
        levels = _grid("drop_levels", levels, groups, buckets)
        object.__setattr__(self, "dscp", dscp)
        object.__setattr__(self, "drop_levels", levels)

        if not isinstance(self.reliable, int) or not 0 <= self.reliable < DSCP_LIMIT:
            raise ValueError(f"the reliable class's DSCP must be in 0..63, not {self.reliable!r}")
        owner = {self.reliable: "the reliable class"}
        for g, row in enumerate(dscp):
            for b, value in enumerate(row):
                if not 0 <= value < DSCP_LIMIT:
                    raise ValueError(f"DSCP of class (group {g}, bucket {b}) must be in 0..63, not {value}")
                if value == 0:
                    raise ValueError(f"class (group {g}, bucket {b}) on DSCP 0: unmarked traffic carries it, "
                                     "and the egress stage must never drop that")
                if value in owner:
                    raise ValueError(f"DSCP {value} is given to both {owner[value]} and class "
                                     f"(group {g}, bucket {b})")
                owner[value] = f"class (group {g}, bucket {b})"
        for g, row in enumerate(levels):
            for b, level in enumerate(row):
                if level < 0:
                    raise ValueError(f"drop level of class (group {g}, bucket {b}) is negative: {level}")
                if g and level < levels[g - 1][b]:
                    raise ValueError(f"drop level of class (group {g}, bucket {b}) is below the one of group "
                                     f"{g - 1}: a back layer would be dropped before a front one")
                if b and level < row[b - 1]:
                    raise ValueError(f"drop level of class (group {g}, bucket {b}) is below the one of bucket "
                                     f"{b - 1}: a large gradient would be dropped before a small one")
        object.__setattr__(self, "_decode", {value: TrafficClass(False, g, b)
                                             for g, row in enumerate(dscp) for b, value in enumerate(row)}
                           | {self.reliable: RELIABLE})

    @classmethod
    def default(cls):
        """The documented default (module docstring): 4 groups x 4 buckets on DSCP 32..47, reliable on 26."""
        return cls()

    def _check_class(self, group, bucket):
        if not 0 <= group < self.layer_groups:
            raise ValueError(f"layer group {group} is not in 0..{self.layer_groups - 1}")
        if not 0 <= bucket < self.magnitude_buckets:
            raise ValueError(f"magnitude bucket {bucket} is not in 0..{self.magnitude_buckets - 1}")

    def dscp_of(self, group, bucket):
        """The DSCP of bounded-loss class ``(group, bucket)``."""
        self._check_class(group, bucket)
        return self.dscp[group][bucket]

    def drop_level(self, group, bucket):
        """The drop level of bounded-loss class ``(group, bucket)`` (0 is dropped first)."""
        self._check_class(group, bucket)
        return self.drop_levels[group][bucket]

    def group_of(self, index, layers):
        """The layer group of layer ``index`` of ``layers`` (:func:`layer_group` with this map's groups)."""
        return layer_group(index, layers, self.layer_groups)

    def decode(self, dscp):
        """The :class:`TrafficClass` of ``dscp``, or ``None`` for a DSCP of no class."""
        if not isinstance(dscp, int | np.integer) or not 0 <= dscp < DSCP_LIMIT:
            raise ValueError(f"a DSCP is in 0..63, not {dscp!r}")
        return self._decode.get(int(dscp))

    def table(self):
        """:meth:`decode` of every DSCP, 0..63: the egress stage's per-DSCP configuration comes from it."""
        return tuple(self._decode.get(dscp) for dscp in range(DSCP_LIMIT))


def layer_group(index, layers, groups):
    """The group of layer ``index`` (0 the front) of ``layers``, in ``groups`` groups: ``index * groups //
    layers``."""
    _positive("layers", layers)
    _positive("groups", groups)
    if not isinstance(index, int | np.integer) or not 0 <= index < layers:
        raise ValueError(f"layer index {index!r} is not in 0..{layers - 1}")
    return int(index) * groups // layers


def _values(tensor, dtype):
    """``tensor`` as float64 values: bit patterns of ``dtype`` when it is given, else floats."""
    tensor = np.asarray(tensor).reshape(-1)
    if dtype is not None:
        return to_float64(get_format(dtype), tensor)
    if tensor.dtype.kind != "f":
        raise ValueError(f"a tensor of {tensor.dtype} needs its element format (dtype=...) to be read as bit "
                         "patterns")
    return tensor.astype(np.float64)


def packet_magnitudes(tensor, packet_elements, *, dtype=None):
    """The mean absolute value of each packet of ``tensor`` (packets of ``packet_elements`` consecutive
    elements, the last one shorter), +inf for a packet holding a NaN. ``dtype``: the tensor holds bit
    patterns of that format (fp32, bf16, fp16), else float values."""
    _positive("packet_elements", packet_elements)
    magnitude = np.abs(_values(tensor, dtype))
    if not len(magnitude):
        return np.zeros(0)
    starts = np.arange(0, len(magnitude), packet_elements)
    counts = np.minimum(packet_elements, len(magnitude) - starts)
    means = np.add.reduceat(magnitude, starts) / counts
    return np.where(np.isnan(means), np.inf, means)


def magnitude_edges(tensor, packet_elements, buckets, *, dtype=None):
    """The ``buckets - 1`` bucket edges of ``tensor``: the ``k / buckets`` quantiles of its packets'
    magnitudes (:func:`packet_magnitudes`)."""
    magnitudes = packet_magnitudes(tensor, packet_elements, dtype=dtype)
    if not len(magnitudes):
        raise ValueError("an empty tensor has no magnitude buckets")
    return _quantiles(magnitudes, buckets)


def _quantiles(magnitudes, buckets):
    return np.quantile(magnitudes, np.arange(1, _positive("buckets", buckets)) / buckets)


def magnitude_bucket(elements, edges, *, dtype=None):
    """The magnitude bucket of one packet's ``elements`` within the tensor whose :func:`magnitude_edges` are
    ``edges``: how many edges are below its mean absolute value."""
    magnitude = packet_magnitudes(elements, max(1, np.size(elements)), dtype=dtype)
    if len(magnitude) != 1:
        raise ValueError("a packet has at least one element")
    return int(np.searchsorted(edges, magnitude[0], side="left"))


def magnitude_buckets(tensor, packet_elements, buckets, *, dtype=None):
    """The magnitude bucket of every packet of ``tensor`` at once (:func:`magnitude_bucket` of each)."""
    magnitudes = packet_magnitudes(tensor, packet_elements, dtype=dtype)
    if not len(magnitudes):
        return np.zeros(0, dtype=np.intp)
    return np.searchsorted(_quantiles(magnitudes, buckets), magnitudes, side="left")


def elements_per_packet(mtu, dtype):
    """How many elements of ``dtype`` a single-packet message of ``mtu`` payload bytes carries after its
    aggregation header."""
    count = (mtu - AGG_HEADER_BYTES) // (get_format(dtype).width // 8)
    if count < 1:
        raise ValueError(f"an MTU of {mtu} bytes holds no element after the {AGG_HEADER_BYTES}-byte header")
    return count


def split_layers(layer_list, tensor):
    """The per-layer views of ``tensor``, every layer's gradient concatenated in ``layer_list``'s order (a
    row of :func:`netreduce.host.workloads.gradients`)."""
    tensor = np.asarray(tensor).reshape(-1)
    total = sum(size for _, size in layer_list)
    if len(tensor) != total:
        raise ValueError(f"a tensor of {len(tensor)} elements for layers of {total}")
    return np.split(tensor, np.cumsum([size for _, size in layer_list])[:-1])


@dataclass(frozen=True, eq=False)
class LayerPackets:
    """The classes of one layer's packets: its name and index (forward order), its layer group, and for
    each packet, in order, its magnitude bucket and its DSCP."""
    name: str
    index: int
    group: int
    buckets: np.ndarray
    dscp: np.ndarray


def classify_layers(layer_list, tensors, packet_elements, class_map=None, *, dtype=None):
    """Every packet's class for a workload: ``layer_list`` as :func:`netreduce.host.workloads.layers` gives
    it (forward order), ``tensors`` one gradient per layer (:func:`split_layers` cuts a concatenated one),
    each cut into packets of ``packet_elements`` elements. ``class_map``: the default when ``None``;
    ``dtype``: the tensors hold bit patterns of that format, else float values. Returns one
    :class:`LayerPackets` per layer."""
    class_map = ClassMap.default() if class_map is None else class_map
    tensors = list(tensors)
    if len(tensors) != len(layer_list):
        raise ValueError(f"{len(tensors)} gradient tensors for {len(layer_list)} layers")
    dscp = np.array(class_map.dscp, dtype=np.uint8)
    out = []
    for index, ((name, size), tensor) in enumerate(zip(layer_list, tensors, strict=True)):
        if np.size(tensor) != size:
            raise ValueError(f"layer {name}: a gradient of {np.size(tensor)} elements for {size}")
        group = class_map.group_of(index, len(layer_list))
        buckets = magnitude_buckets(tensor, packet_elements, class_map.magnitude_buckets, dtype=dtype)
        out.append(LayerPackets(name, index, group, buckets, dscp[group][buckets]))
    return out
