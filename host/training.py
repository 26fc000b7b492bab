"""Data-parallel SGD through the golden model's bounded-loss class: does training tolerate MLT's loss?

The experiment behind ``netreduce experiment loss-tolerance`` (issue 16, "Does it help training?"). It
needs the ``experiment`` extra (scikit-learn for the data set; the command also plots with matplotlib).

Rules
-----
- **Data**: scikit-learn's digits (1797 images of 8 x 8 pixels, 10 classes, shipped inside the package),
  pixels divided by 16. A permutation from the seed puts :data:`TEST_SAMPLES` images in the test set and
  cuts the rest into N equal shards, one per worker (the remainder is unused).
- **Model**: a 64-32-10 perceptron, ReLU, softmax cross-entropy, in binary32. Its parameters are
  :data:`LAYERS` in forward order, each weight stored (out, in) row by row as frameworks store it; fc1's
  weights from a normal of deviation sqrt(2 / 64), fc2's sqrt(1 / 32), biases 0, from the seed.
- **Step**: each worker draws :data:`BATCH` samples of its shard without replacement and computes the mean
  gradient of its batch. The N gradients, flattened in :data:`LAYERS` order as binary32 bit patterns, are
  all-reduced through the emulated network around the golden model
  (:func:`netreduce.host.network.build_allreduce`, ``traffic_class="lossy"``, ``layers=LAYERS``, MTU
  :data:`MTU`: 43 single-packet messages per worker, classified by :mod:`netreduce.host.classify`'s
  default map) with a :class:`~netreduce.host.drops.ContributionDrops` on the host-to-switch side: only
  gradient packets are dropped, never control frames, credits or results. Each worker then takes
  :meth:`LossyWorker.average` (``rescale``: divided by each element's contributors, else by N) and applies
  ``parameters -= LR * average``.
- **Checks**, every step (an :class:`ExperimentError` otherwise): the network run is ``done``; every
  worker's result is exactly the tree sum of its contributors
  (:func:`~netreduce.host.network.expected_partial_sum`), and at rate 0 every element has all N
  contributors, so that the result is the tree sum of the N gradients
  (:func:`~netreduce.host.network.expected_sum`); every worker received the same results and bitmaps, so
  the workers' averages and parameters stay equal.
- **Loss**: each worker keeps the library's loss bound (0.01). Since only contributions are dropped, a
  result that never comes had every contribution lost: the switch completes the message at its deadline
  with an empty bitmap and sends nothing, so the worker's result requests go unanswered and it
  zero-fills.
- **Randomness**: the split, the initial parameters and every worker's batches depend on the seed only,
  alike in every configuration; the drops of step ``s`` on the seed and ``s``.
- **Configuration**: ``(policy, rate, rescale)``; rate 0 is the lossless baseline (policy and rescaling
  change nothing there: every element has all N contributors).
- **Evaluation**: the test accuracy of the (common) parameters at step 0, every ``eval_every`` steps, and
  after the last step; the *gradient error* of each step, ``|average - mean| / |mean|`` (Euclidean norms
  over every element), where ``mean`` is the exact (float64) mean of the N gradients: what the loss and
  the rescaling did to the update.
"""

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from netreduce.host.drops import ContributionDrops, DropPolicy
from netreduce.host.network import build_allreduce, expected_partial_sum, expected_sum
from netreduce.host.worker import tensor_dtype

__all__ = ["LAYERS", "SHAPES", "MTU", "BATCH", "LR", "TEST_SAMPLES", "ExperimentError", "Data", "Configuration",
           "Run", "AllReduce", "load_data", "initial_parameters", "gradient", "accuracy", "allreduce", "train",
           "configurations"]

SHAPES = {"fc1.weight": (32, 64), "fc1.bias": (32,), "fc2.weight": (10, 32), "fc2.bias": (10,)}
LAYERS = [(name, int(np.prod(shape))) for name, shape in SHAPES.items()]
ELEMENTS = sum(size for _, size in LAYERS)
MTU = 256                   # 60 binary32 elements a packet: fc1.weight alone is 35 packets, 4 magnitude buckets
BATCH = 32                  # samples per worker and step
LR = 0.1
TEST_SAMPLES = 597          # a third of the digits
TIME_LIMIT_NS = 1_000_000_000


class ExperimentError(RuntimeError):
    """A check of the experiment failed (module docstring): the emulated all-reduce is not what it must be."""


@dataclass(frozen=True)
class Data:
    """The test set and one training shard per worker (float32 pixels in 0..1, integer labels)."""
    shards_x: list
    shards_y: list
    test_x: np.ndarray
    test_y: np.ndarray


@dataclass(frozen=True)
class Configuration:
    """One line of the figure: ``policy`` ``None`` is the lossless baseline (rate 0)."""
    policy: DropPolicy | None
    rate: float
    rescale: bool = True

    @property
    def name(self):
        if self.policy is None:
            return "lossless"
        return f"{self.policy.value} p={self.rate:g} {'rescale' if self.rescale else 'zero-fill'}"


@dataclass
class AllReduce:
    """One emulated all-reduce: each worker's average (float64, :meth:`LossyWorker.average`), the common
    result as received (binary32 bit patterns of the sums, before any rescaling) and its contributor
    bitmaps, and what the network did (:meth:`Network.summary`)."""
    averages: list
    result: np.ndarray
    contributors: np.ndarray
    summary: dict


@dataclass
class Run:
    """One configuration trained: the test accuracy at ``evaluated`` steps and the network's totals."""
    configuration: Configuration
    evaluated: list = field(default_factory=list)
    accuracy: list = field(default_factory=list)
    sent: Counter = field(default_factory=Counter)          # contributions by drop level
    dropped: Counter = field(default_factory=Counter)
    deadline_completions: int = 0
    late: int = 0
    zero_filled_elements: int = 0                           # summed over the workers, as `simulate` does
    result_elements: int = 0
    result_requests: int = 0
    gradient_errors: list = field(default_factory=list)     # per step: |average - mean| / |mean|

    @property
    def final_accuracy(self):
        return self.accuracy[-1]

    def summary(self):
        sent, dropped = sum(self.sent.values()), sum(self.dropped.values())
        config = self.configuration
        return {
            "name": config.name, "policy": config.policy.value if config.policy else "lossless",
            "loss": config.rate, "rescale": config.rescale, "final_accuracy": round(self.final_accuracy, 4),
            "dropped_fraction": round(dropped / sent, 6) if sent else 0.0,
            "dropped_by_level": {str(level): {"sent": self.sent[level], "dropped": self.dropped[level]}
                                 for level in sorted(self.sent)},
            "deadline_completions": self.deadline_completions, "late": self.late,
            "zero_filled_elements": self.zero_filled_elements,
            "loss_fraction": round(self.zero_filled_elements / self.result_elements, 6) if self.result_elements
            else 0.0,
            "result_requests": self.result_requests,
            "gradient_error": round(float(np.mean(self.gradient_errors)), 6) if self.gradient_errors else 0.0,
        }


def load_data(workers, seed=0):
    """The digits split for ``workers`` workers (module docstring)."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16).astype(np.float32)
    y = digits.target.astype(np.intp)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:TEST_SAMPLES], order[TEST_SAMPLES:]
    per_worker = len(train) // workers
    if per_worker < BATCH:
        raise ValueError(f"{workers} workers leave {per_worker} training samples each, fewer than a batch of {BATCH}")
    shards = [train[w * per_worker:(w + 1) * per_worker] for w in range(workers)]
    return Data([x[s] for s in shards], [y[s] for s in shards], x[test], y[test])


def initial_parameters(seed=0):
    """The parameters of :data:`LAYERS` before the first step (module docstring), float32."""
    rng = np.random.default_rng(seed)
    deviation = {"fc1.weight": np.sqrt(2 / 64), "fc2.weight": np.sqrt(1 / 32)}
    return [(rng.standard_normal(shape) * deviation[name]).astype(np.float32) if name in deviation
            else np.zeros(shape, np.float32) for name, shape in SHAPES.items()]


def _forward(parameters, x):
    w1, b1, w2, b2 = parameters
    hidden = np.maximum(x @ w1.T + b1, np.float32(0))
    return hidden, hidden @ w2.T + b2


def gradient(parameters, x, y):
    """The mean softmax cross-entropy gradient of a batch, flattened in :data:`LAYERS` order (float32)."""
    _, _, w2, _ = parameters
    hidden, logits = _forward(parameters, x)
    logits = logits - logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    probabilities[np.arange(len(y)), y] -= 1
    delta = probabilities / np.float32(len(y))
    back = (delta @ w2) * (hidden > 0)
    return np.concatenate([(back.T @ x).ravel(), back.sum(axis=0), (delta.T @ hidden).ravel(), delta.sum(axis=0)])


def accuracy(parameters, x, y):
    """The fraction of ``x`` classified as ``y``."""
    return float(np.mean(_forward(parameters, x)[1].argmax(axis=1) == y))


def _unflatten(flat):
    parts, start = [], 0
    for name, size in LAYERS:
        parts.append(flat[start:start + size].reshape(SHAPES[name]))
        start += size
    return parts


def allreduce(gradients, drops, *, rescale=True, seed=0):
    """All-reduce ``gradients`` (workers x :data:`ELEMENTS` float32) through the emulated network with
    ``drops`` (a :class:`ContributionDrops`) on the host-to-switch side; checks the rules of the module
    docstring and returns the :class:`AllReduce`."""
    gradients = np.ascontiguousarray(gradients, dtype=np.float32)
    workers, elements = gradients.shape
    bits = gradients.view(tensor_dtype("fp32"))
    network, (job,), inputs = build_allreduce(
        workers=workers, nbytes=4 * elements, mtu=MTU, seed=seed, inputs={0: bits}, faults_up=drops.spec,
        traffic_class="lossy", layers=LAYERS, rescale=rescale)
    drops.plan(network.workers)
    status = network.run(time_limit_ns=TIME_LIMIT_NS)
    if status != "done":
        raise ExperimentError(f"the all-reduce ended {status}: {network.summary()['errors']}")
    first = network.workers[0]
    for worker in network.workers:
        if not np.array_equal(worker.result, expected_partial_sum(job, inputs[0], worker.contributors)):
            raise ExperimentError(f"worker {worker.index}'s result is not the tree sum of its contributors")
        if not (np.array_equal(worker.result, first.result) and np.array_equal(worker.contributors,
                                                                                first.contributors)):
            raise ExperimentError(f"workers 0 and {worker.index} received different results: out of sync")
    if drops.rate == 0 and not (np.all(first.contributors == (1 << workers) - 1)
                                and np.array_equal(first.result, expected_sum(job, inputs[0]))):
        raise ExperimentError("without loss the result is not the tree sum of every worker's gradient")
    return AllReduce([worker.average() for worker in network.workers], first.result.copy(),
                     first.contributors.copy(), network.summary())


def train(configuration, data, *, steps, seed=0, eval_every=10, progress=None):
    """Train from :func:`initial_parameters` for ``steps`` steps under ``configuration`` (module docstring);
    ``progress()`` is called after every step."""
    workers = len(data.shards_x)
    replicas = [initial_parameters(seed) for _ in range(workers)]
    batches = np.random.default_rng([seed, 1])
    run = Run(configuration)

    def evaluate(step):
        run.evaluated.append(step)
        run.accuracy.append(accuracy(replicas[0], data.test_x, data.test_y))

    evaluate(0)
    for step in range(1, steps + 1):
        gradients = []
        for parameters, x, y in zip(replicas, data.shards_x, data.shards_y, strict=True):
            batch = batches.choice(len(y), BATCH, replace=False)
            gradients.append(gradient(parameters, x[batch], y[batch]))
        drops = ContributionDrops(configuration.rate, configuration.policy or DropPolicy.UNIFORM,
                                  seed=f"{seed}:{step}")
        gradients = np.stack(gradients)
        reduced = allreduce(gradients, drops, rescale=configuration.rescale, seed=seed * 100_003 + step)
        mean = gradients.astype(np.float64).mean(axis=0)
        run.gradient_errors.append(float(np.linalg.norm(reduced.averages[0] - mean) / np.linalg.norm(mean)))
        for parameters, average in zip(replicas, reduced.averages, strict=True):
            for tensor, change in zip(parameters, _unflatten((LR * average).astype(np.float32)), strict=True):
                tensor -= change
        if any(not np.array_equal(a, b) for parameters in replicas[1:] for a, b in zip(replicas[0], parameters,
                                                                                        strict=True)):
            raise ExperimentError(f"step {step}: the workers' parameters differ")
        run.sent.update(drops.sent)
        run.dropped.update(drops.dropped)
        counters, lossy = reduced.summary["switch"], reduced.summary["lossy"]
        run.deadline_completions += counters["deadline_completions"]
        run.late += counters["late"]
        run.zero_filled_elements += lossy["zero_filled_elements"]
        run.result_elements += workers * ELEMENTS
        run.result_requests += lossy["result_requests"]
        if step % eval_every == 0 or step == steps:
            evaluate(step)
        if progress is not None:
            progress()
    return run


def configurations(rates):
    """The lossless baseline, then for each non-zero rate of ``rates``: MLT-ordered and uniform drops, each
    with rescaling on and off."""
    rates = sorted({float(rate) for rate in rates} - {0.0})
    return [Configuration(None, 0.0)] + [Configuration(policy, rate, rescale) for policy in DropPolicy
                                         for rate in rates for rescale in (True, False)]
