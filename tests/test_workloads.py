"""netreduce.host.workloads: layer lists of real models, buckets, gradients, and an all-reduce of real
layers through the golden model's switch."""

import numpy as np
import pytest

from netreduce.host import workloads
from netreduce.host.network import build_allreduce, expected_sum
from netreduce.sim.fp import get_format, to_float64

# published parameter counts: torchvision resnet50, Hugging Face bert-base-uncased (BertModel)
PUBLISHED = {"resnet50": 25_557_032, "bert-base": 109_482_240}


@pytest.mark.parametrize("model", workloads.MODELS)
def test_layer_totals_are_the_published_parameter_counts(model):
    layer_list = workloads.layers(model)
    assert sum(size for _, size in layer_list) == PUBLISHED[model]
    assert len({name for name, _ in layer_list}) == len(layer_list)


def test_known_layers():
    resnet = dict(workloads.layers("resnet50"))
    assert resnet["conv1.weight"] == 64 * 3 * 7 * 7
    assert resnet["layer4.2.conv3.weight"] == 2048 * 512
    assert resnet["fc.weight"] == 1000 * 2048 and resnet["fc.bias"] == 1000
    bert = dict(workloads.layers("bert-base"))
    assert bert["embeddings.word_embeddings.weight"] == 30522 * 768
    assert bert["encoder.layer.11.intermediate.dense.weight"] == 768 * 3072


@pytest.mark.parametrize("bucket_bytes", [4, 1 << 20, 25 << 20])
def test_buckets_hold_every_layer_once_backward(bucket_bytes):
    layer_list = workloads.layers("resnet50")
    sizes = dict(layer_list)
    packed = workloads.buckets(layer_list, bucket_bytes)
    assert [name for names, _ in packed for name in names] == [name for name, _ in reversed(layer_list)]
    for names, elements in packed:
        assert elements == sum(sizes[name] for name in names)
        assert elements * 4 <= bucket_bytes or len(names) == 1


def test_inputs_must_match_nbytes():
    grads = workloads.gradients(workloads.synthetic([10]), 2)
    with pytest.raises(ValueError, match="10 elements for nbytes=4096"):
        build_allreduce(workers=2, inputs={0: grads}, nbytes=4096)


def test_bad_arguments():
    with pytest.raises(ValueError, match="model must be"):
        workloads.layers("vgg")
    with pytest.raises(ValueError, match="at least one element"):
        workloads.synthetic([3, 0])


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_gradients_are_finite_and_shaped(dtype):
    layer_list = workloads.synthetic([100, 2000, 7])
    grads = workloads.gradients(layer_list, 3, dtype, np.random.default_rng(1))
    assert grads.shape == (3, 2107) and grads.dtype == get_format(dtype).dtype
    values = to_float64(dtype, grads)
    assert np.isfinite(values).all() and np.abs(values).max() < 1.0 and (values != 0).mean() > 0.9


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_allreduce_of_resnet_layers(dtype):
    """The first layers of ResNet-50 (conv1, bn1, the first bottleneck's 1x1 convolution and its norm's
    weight), all-reduced by four workers through the golden model: every worker gets the tree sum."""
    layer_list = workloads.layers("resnet50")[:5]
    assert [name for name, _ in layer_list] == ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight",
                                                "layer1.0.bn1.weight"]
    assert sum(size for _, size in layer_list) == 9408 + 64 + 64 + 4096 + 64
    grads = workloads.gradients(layer_list, 4, dtype, np.random.default_rng(2))
    network, jobs, inputs = build_allreduce(workers=4, dtype=dtype, mtu=4096, inputs={0: grads},
                                            nbytes=grads.shape[1] * grads.itemsize, seed=3)
    assert network.run() == "done"
    expected = expected_sum(jobs[0], inputs[0])
    for worker in network.workers:
        np.testing.assert_array_equal(worker.result, expected)
