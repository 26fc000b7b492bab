"""Workloads: the gradient tensors of real models, layer by layer, and synthetic ones.

The layer lists are derived from each architecture's definition (not copied from a framework), in the
order the layers run forward; a data-parallel framework all-reduces their gradients in reverse order,
bucketed (:func:`buckets`). Their totals are the published parameter counts: ResNet-50 (torchvision's
``resnet50``) 25,557,032, BERT-base (``bert-base-uncased``'s ``BertModel``, pooler included)
109,482,240.

- :func:`layers` ``(model)``: ``[(name, elements), ...]`` for ``"resnet50"`` or ``"bert-base"``;
- :func:`synthetic` ``(sizes)``: the same shape of list for given element counts;
- :func:`buckets` ``(layers, bucket_bytes, element_bytes)``: layers in backward order packed into buckets
  of at most ``bucket_bytes`` (a layer larger than a bucket is a bucket of its own), as PyTorch DDP
  does with its 25 MiB default;
- :func:`gradients` ``(layers, workers, dtype, rng)``: random gradients, one array per worker, in the
  format's bit patterns (what ``netreduce.host.network.build_allreduce`` takes as ``inputs``).
"""

import numpy as np

from netreduce.sim.fp import from_float64

__all__ = ["MODELS", "layers", "synthetic", "buckets", "gradients"]

MODELS = ("resnet50", "bert-base")


def _conv(name, cin, cout, k):
    return [(f"{name}.weight", cout * cin * k * k)]


def _norm(name, channels):
    return [(f"{name}.weight", channels), (f"{name}.bias", channels)]


def _linear(name, cin, cout):
    return [(f"{name}.weight", cout * cin), (f"{name}.bias", cout)]


def _resnet50():
    out = _conv("conv1", 3, 64, 7) + _norm("bn1", 64)
    channels = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True), start=1):
        for block in range(blocks):
            prefix = f"layer{stage}.{block}"
            out += (_conv(f"{prefix}.conv1", channels, width, 1) + _norm(f"{prefix}.bn1", width)
                    + _conv(f"{prefix}.conv2", width, width, 3) + _norm(f"{prefix}.bn2", width)
                    + _conv(f"{prefix}.conv3", width, 4 * width, 1) + _norm(f"{prefix}.bn3", 4 * width))
            if block == 0:
                out += _conv(f"{prefix}.downsample.0", channels, 4 * width, 1) + \
                    _norm(f"{prefix}.downsample.1", 4 * width)
            channels = 4 * width
    return out + _linear("fc", channels, 1000)


def _bert_base(hidden=768, layers_count=12, intermediate=3072, vocab=30522, positions=512, types=2):
    out = [("embeddings.word_embeddings.weight", vocab * hidden),
           ("embeddings.position_embeddings.weight", positions * hidden),
           ("embeddings.token_type_embeddings.weight", types * hidden)] + _norm("embeddings.LayerNorm", hidden)
    for i in range(layers_count):
        prefix = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            out += _linear(f"{prefix}.attention.self.{part}", hidden, hidden)
        out += (_linear(f"{prefix}.attention.output.dense", hidden, hidden)
                + _norm(f"{prefix}.attention.output.LayerNorm", hidden)
                + _linear(f"{prefix}.intermediate.dense", hidden, intermediate)
                + _linear(f"{prefix}.output.dense", intermediate, hidden)
                + _norm(f"{prefix}.output.LayerNorm", hidden))
    return out + _linear("pooler.dense", hidden, hidden)


def layers(model):
    """``[(name, elements), ...]`` of ``model`` (one of :data:`MODELS`), in forward order."""
    if model == "resnet50":
        return _resnet50()
    if model == "bert-base":
        return _bert_base()
    raise ValueError(f"model must be one of {', '.join(MODELS)}, not {model!r}")


def synthetic(sizes):
    """Layers of the given element counts, named ``layer0``, ``layer1``, ..."""
    sizes = [int(size) for size in sizes]
    if any(size < 1 for size in sizes):
        raise ValueError("every synthetic layer needs at least one element")
    return [(f"layer{i}", size) for i, size in enumerate(sizes)]


def buckets(layer_list, bucket_bytes=25 << 20, element_bytes=4):
    """Layers in backward order packed into buckets of at most ``bucket_bytes``: ``[[name, ...], ...]``
    with the element count of each bucket: ``[(names, elements), ...]``."""
    if bucket_bytes < element_bytes:
        raise ValueError("a bucket must hold at least one element")
    out, names, elements = [], [], 0
    for name, size in reversed(layer_list):
        if names and (elements + size) * element_bytes > bucket_bytes:
            out.append((names, elements))
            names, elements = [], 0
        names.append(name)
        elements += size
    if names:
        out.append((names, elements))
    return out


def gradients(layer_list, workers, dtype="fp32", rng=None, scale=1e-3):
    """Random gradients of every layer, concatenated, as the format's bit patterns: shape ``(workers,
    total elements)``. Each layer's values are normal with a standard deviation of ``scale`` times a
    per-layer factor between 1/16 and 16, rounded to the format (RNE), so that layers differ in
    magnitude as real gradients do and 16-bit formats see subnormals."""
    rng = np.random.default_rng(0) if rng is None else rng
    parts = [rng.normal(0.0, scale * 2.0 ** rng.uniform(-4, 4), (workers, size)) for _, size in layer_list]
    return from_float64(dtype, np.concatenate(parts, axis=1))
