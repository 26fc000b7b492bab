"""The loss-tolerance experiment (netreduce.host.training, netreduce.host.drops, `netreduce experiment
loss-tolerance`): the lossless all-reduce is the exact tree sum, the workers stay in sync, MLT-ordered drops
take the lowest drop levels first and uniform ones every level alike, the dropped fraction is near its
target, and the command's JSON, plot and user errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from netreduce.host.drops import ContributionDrops, DropPolicy, level_drop_probabilities
from netreduce.host.training import (
    ELEMENTS,
    LAYERS,
    Configuration,
    allreduce,
    gradient,
    initial_parameters,
    load_data,
    train,
)
from netreduce.sim.fp import to_float64, tree_sum

WORKERS = 4


@pytest.fixture(scope="module")
def data():
    return load_data(WORKERS, seed=0)


@pytest.fixture(scope="module")
def gradients(data):
    parameters = initial_parameters(0)
    return np.stack([gradient(parameters, x[:32], y[:32]) for x, y in zip(data.shards_x, data.shards_y,
                                                                          strict=True)])


def netreduce(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "netreduce", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_the_model_and_its_layers():
    assert LAYERS == [("fc1.weight", 2048), ("fc1.bias", 32), ("fc2.weight", 320), ("fc2.bias", 10)]
    assert ELEMENTS == 2410


def test_lossless_allreduce_is_the_tree_sum_of_every_gradient(gradients):
    drops = ContributionDrops(0.0)
    reduced = allreduce(gradients, drops, seed=3)
    bits = gradients.view(np.uint32)
    np.testing.assert_array_equal(reduced.result, tree_sum("fp32", bits).astype(np.uint32))
    assert np.all(reduced.contributors == 0b1111)
    sums = to_float64("fp32", reduced.result)
    np.testing.assert_allclose(sums, gradients.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-7)
    for average in reduced.averages:
        np.testing.assert_array_equal(average, sums / WORKERS)
    assert sum(drops.dropped.values()) == 0 and sum(drops.sent.values()) == WORKERS * 43
    assert reduced.summary["switch"]["deadline_completions"] == 0


@pytest.mark.parametrize("rescale", [True, False])
def test_lossy_workers_receive_the_same_partial_sums(gradients, rescale):
    drops = ContributionDrops(0.3, DropPolicy.UNIFORM, seed=5)
    reduced = allreduce(gradients, drops, rescale=rescale, seed=5)
    assert sum(drops.dropped.values()) > 0
    assert all(np.array_equal(average, reduced.averages[0]) for average in reduced.averages)
    count = np.array([bin(int(c)).count("1") for c in reduced.contributors])
    assert 0 < count.min() < WORKERS
    sums = to_float64("fp32", reduced.result)
    expected = np.divide(sums, count, out=np.zeros_like(sums), where=count > 0) if rescale else sums / WORKERS
    np.testing.assert_array_equal(reduced.averages[0], expected)


def test_mlt_probabilities_fill_the_lowest_levels_first():
    levels = [0] * 9 + [1] * 10 + [2] * 10 + [3] * 11 + [4] + [5] * 2
    probabilities = level_drop_probabilities(levels, 0.3)
    assert probabilities[0] == 1.0 and probabilities[1] == pytest.approx((0.3 * 43 - 9) / 10)
    assert all(probabilities[level] == 0 for level in (2, 3, 4, 5))
    assert sum(probabilities[level] * levels.count(level) for level in probabilities) == pytest.approx(0.3 * 43)
    assert level_drop_probabilities(levels, 0.0) == dict.fromkeys(range(6), 0.0)
    assert level_drop_probabilities(levels, 1.0) == dict.fromkeys(range(6), 1.0)


def drop_rates(run):
    return {level: run.dropped[level] / run.sent[level] for level in run.sent}


def test_mlt_drops_take_front_and_small_first_and_uniform_drops_take_all_alike(data):
    mlt = train(Configuration(DropPolicy.MLT, 0.3), data, steps=4, eval_every=4)
    uniform = train(Configuration(DropPolicy.UNIFORM, 0.3), data, steps=4, eval_every=4)
    sent = sum(mlt.sent.values())
    assert sent == sum(uniform.sent.values()) == 4 * WORKERS * 43
    # levels 0 (front group, smallest quartile: 9 packets a worker) and 1 (10) hold the 12.9 packets of 30 %
    rates = drop_rates(mlt)
    assert rates[0] == 1.0 and 0.2 < rates[1] < 0.6
    assert all(rates[level] == 0 for level in rates if level >= 2)
    assert abs(sum(mlt.dropped.values()) / sent - 0.3) < 0.03
    # blind to class: every well-populated level loses about 30 %
    rates = drop_rates(uniform)
    assert all(0.1 < rates[level] < 0.5 for level in (0, 1, 2, 3))
    assert abs(sum(uniform.dropped.values()) / sent - 0.3) < 0.06
    assert uniform.deadline_completions > 0 and mlt.deadline_completions > 0


def test_training_stays_in_sync_and_learns_without_loss(data):
    run = train(Configuration(None, 0.0), data, steps=30, eval_every=10)
    assert run.evaluated == [0, 10, 20, 30]
    assert run.final_accuracy > run.accuracy[0] + 0.2
    summary = run.summary()
    assert summary["dropped_fraction"] == 0.0 and run.zero_filled_elements == 0
    assert 0 <= summary["gradient_error"] < 1e-6          # binary32 rounding of the sum only


def test_command_quick_run(tmp_path):
    out = tmp_path / "plot.png"
    result = netreduce("experiment", "loss-tolerance", "--quick", "--out", str(out), "--seed", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert {"experiment", "workers", "steps", "seed", "loss_rates", "out", "evaluated", "configurations"} <= set(report)
    assert report["steps"] == 4 and report["workers"] == WORKERS and report["loss_rates"] == [0.2]
    names = [c["name"] for c in report["configurations"]]
    assert names == ["lossless", "mlt p=0.2 rescale", "mlt p=0.2 zero-fill", "uniform p=0.2 rescale",
                     "uniform p=0.2 zero-fill"]
    for configuration in report["configurations"]:
        assert {"final_accuracy", "dropped_fraction", "dropped_by_level", "deadline_completions",
                "zero_filled_elements", "loss_fraction", "gradient_error", "accuracy"} <= set(configuration)
        assert len(configuration["accuracy"]) == len(report["evaluated"]) == 3
        target = configuration["loss"]
        assert abs(configuration["dropped_fraction"] - target) < 0.07
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args", [
    ["experiment"],
    ["experiment", "loss-tolerance", "--workers", "33"],
    ["experiment", "loss-tolerance", "--loss", "1.5"],
    ["experiment", "loss-tolerance", "--steps", "0"],
    ["experiment", "loss-tolerance", "--out", "no/such/folder/plot.png"],
])
def test_user_errors_are_one_line(tmp_path, args):
    result = netreduce(*args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_without_the_extra_the_error_names_it(tmp_path):
    code = ("import sys; sys.modules['sklearn'] = None; from netreduce.cli import main; "
            "sys.exit(main(['experiment', 'loss-tolerance', '--quick', '--out', 'x.png']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'experiment' extra" in lines[0], result.stderr
    assert not (tmp_path / "x.png").exists()
