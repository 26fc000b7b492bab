"""``netreduce simulate``: one all-reduce of emulated RoCE v2 workers through the switch, with faults.

Every worker of every job sends B bytes of gradients (random from the seed, or ``--input``) through RC
connections to its ring neighbour; the switch sums them; every worker receives the sum. Prints one JSON
summary: packets and bytes per direction, retransmissions, drops by reason, clocks, throughput in beats
per clock per port, and ``match`` (whether every worker's result equals the golden model's tree sum, bit
for bit). ``--pcap`` writes every frame on every host's link, at both ends, with its simulated time in
nanoseconds, to a pcapng file (``netreduce.host.network``); ``--waves`` the RTL simulation's waveform.

``--class lossy`` runs the bounded-loss class instead (docs/ARCHITECTURE.md, "Bounded-loss class (MLT)"):
every message is one UC WRITE ONLY with immediate, nothing is retransmitted, the switch completes a message
when every worker's packet is in or ``--deadline-us`` after its first, each result names its contributors,
and a worker zero-fills what never comes, recovering it with result requests past its ``--loss-bound``.
``match`` then means: every element of every result is the tree sum of exactly the workers its bitmap names
(+0 where nothing came).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

from ..cli import UserError
from ..wire import DTYPE_CODES

__all__ = ["register", "run", "load_inputs"]


def _bounded(kind, low, high=None, what=None):
    """An argparse type: ``kind`` (int or float) from ``low`` to ``high``, with a one-line error."""
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} {what or f'must be at least {low}'}")
        return value
    return convert


_probability = _bounded(float, 0.0, 1.0, "is not a probability between 0 and 1")
_fraction = _bounded(float, 0.0, 1.0, "is not a fraction between 0 and 1")
_positive = _bounded(int, 1)
_non_negative = _bounded(int, 0, what="must not be negative")


def register(subparsers):
    parser = subparsers.add_parser("simulate", help="run an all-reduce of emulated RoCE workers through the "
                                   "switch and print a JSON summary", description=__doc__)
    parser.add_argument("--workers", type=_positive, required=True, metavar="N", help="workers per job")
    parser.add_argument("--bytes", type=_non_negative, metavar="B",
                        help="gradient bytes per worker (required unless --input is given)")
    parser.add_argument("--mtu", type=int, choices=(256, 512, 1024, 2048, 4096), default=1024,
                        help="RoCE path MTU in bytes (default 1024)")
    parser.add_argument("--dtype", choices=tuple(DTYPE_CODES), default="fp32")
    parser.add_argument("--loss", type=_probability, default=0.0, metavar="P",
                        help="loss probability per frame, on both sides of the switch")
    parser.add_argument("--dup", type=_probability, default=0.0, metavar="P", help="duplication probability")
    parser.add_argument("--reorder", type=_probability, default=0.0, metavar="P",
                        help="probability that a frame is held back and overtaken")
    parser.add_argument("--corrupt", type=_probability, default=0.0, metavar="P",
                        help="probability of a bit flip that the ICRC catches")
    parser.add_argument("--jobs", type=_positive, default=1, metavar="J", help="concurrent jobs")
    parser.add_argument("--ports", type=_positive, default=1, metavar="P", help="switch ports")
    parser.add_argument("--width", type=int, choices=(64, 512), default=64, help="datapath width in bits")
    parser.add_argument("--engine", choices=("model", "rtl"), default="model",
                        help="the switch: the golden model or the generated Verilog")
    parser.add_argument("--message-packets", type=_positive, default=4, metavar="M",
                        help="most packets per message (default 4)")
    parser.add_argument("--message-slots", type=_positive, default=4, metavar="K",
                        help="messages per job in the switch at once: the credit window, a power of two "
                             "(default 4)")
    parser.add_argument("--start-psn", type=_bounded(int, 0, (1 << 24) - 1, "is not a 24-bit PSN"), metavar="PSN",
                        help="first PSN of worker 0's connection; worker w's starts at PSN + 7 w (modulo 2^24) "
                             "(default: random from --seed)")
    parser.add_argument("--start-msg", type=_bounded(int, 0, (1 << 32) - 1, "is not a 32-bit message number"),
                        default=0, metavar="S",
                        help="every job's first message sequence number; later ones go on modulo 2^32 "
                             "(default 0)")
    parser.add_argument("--seed", type=int, default=0, metavar="S")
    parser.add_argument("--input", metavar="FILE.npz",
                        help="gradients: one array per worker (in key order); floats are rounded to "
                             "--dtype, unsigned integers are taken as bit patterns")
    parser.add_argument("--dump", metavar="FILE.npz",
                        help="write each job's and worker's input and received result")
    parser.add_argument("--pcap", metavar="FILE.pcapng",
                        help="write every frame on every host link, at the sending and the receiving end, "
                             "with simulated timestamps, to a pcapng file")
    parser.add_argument("--waves", metavar="FILE.vcd",
                        help="with --engine rtl: write the simulation's waveform there (a separate build, "
                             "with tracing, the first time)")
    parser.add_argument("--time-limit-ms", type=float, default=1000.0, metavar="T",
                        help="simulated time after which the run stops with status \"timeout\"")
    parser.add_argument("--class", dest="traffic_class", choices=("reliable", "lossy"), default="reliable",
                        help="reliable: RC messages, retransmitted until summed (the default); lossy: MLT's "
                             "bounded-loss class, single-packet UC messages summed when all are in or at a "
                             "deadline")
    parser.add_argument("--deadline-us", type=_positive_float, metavar="T",
                        help="with --class lossy: the switch completes a message T us after its first packet "
                             "(default: 10 us plus twice the time a port takes to carry a window of every "
                             "worker's messages)")
    parser.add_argument("--loss-bound", type=_fraction, metavar="F",
                        help="with --class lossy: each worker zero-fills missing results up to this fraction of "
                             "its elements, and asks the switch for them past it (default 0.01)")
    parser.add_argument("--no-rescale", dest="rescale", action="store_false",
                        help="with --class lossy: average by N (MLT's zero fill) rather than by the number of "
                             "contributors of each result")
    parser.set_defaults(func=run)


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a positive number")
    return value


def load_inputs(path, workers, dtype):
    """The ``(workers, elements)`` bit patterns of an ``.npz`` with one array per worker."""
    import numpy as np

    from ..host.worker import tensor_dtype
    from ..sim.fp import from_float64, get_format
    try:
        archive = np.load(path)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path} as an .npz file: {error}") from None
    keys = sorted(archive.files)
    if len(keys) != workers:
        raise UserError(f"{path} holds {len(keys)} arrays for {workers} workers")
    arrays = [np.asarray(archive[key]).ravel() for key in keys]
    if len({a.size for a in arrays}) != 1:
        raise UserError(f"the arrays of {path} differ in length")
    bits = tensor_dtype(dtype)
    rows = []
    for key, array in zip(keys, arrays, strict=True):
        if array.dtype.kind == "f":
            rows.append(from_float64(get_format(dtype), array.astype(np.float64)).astype(bits))
        elif array.dtype.kind == "u" and array.dtype.itemsize == bits.itemsize:
            rows.append(array.astype(bits))
        else:
            raise UserError(f"array {key!r} of {path}: {array.dtype} is neither float nor "
                            f"uint{8 * bits.itemsize}")
    return np.stack(rows)


def _bit_view(dtype):
    import numpy as np
    return {"fp32": np.float32, "fp16": np.float16}.get(dtype)


def run(args):
    from ..host.faults import FaultSpec

    if args.bytes is None and args.input is None:
        raise UserError("give --bytes B or --input FILE.npz")
    element = 4 if args.dtype == "fp32" else 2
    inputs = None
    if args.input is not None:
        if not Path(args.input).is_file():
            raise UserError(f"no such file: {args.input}")
        data = load_inputs(args.input, args.workers, args.dtype)
        inputs = dict.fromkeys(range(args.jobs), data)
        nbytes = data.shape[1] * element
    else:
        if args.bytes % element:
            raise UserError(f"--bytes {args.bytes} is not a whole number of {args.dtype} elements")
        nbytes = args.bytes
    if args.mtu * args.message_packets > 1 << 20:
        raise UserError("--mtu times --message-packets must be at most 1 MiB")
    if args.message_slots & (args.message_slots - 1):
        raise UserError(f"--message-slots {args.message_slots} is not a power of two")
    if args.waves and args.engine != "rtl":
        raise UserError("--waves needs --engine rtl")
    _check_class(args)
    for path in (args.pcap, args.waves):
        if path:
            try:
                Path(path).open("wb").close()
            except OSError as error:
                raise UserError(f"cannot write {path}: {error.strerror}") from None
    spec = FaultSpec(loss=args.loss, duplicate=args.dup, reorder=args.reorder, corrupt=args.corrupt)
    started = time.monotonic()
    if args.engine == "rtl":
        summary, pairs = _run_rtl(args, nbytes, inputs)
    else:
        summary, pairs = _run_model(args, nbytes, inputs, spec)
    clocks = math.ceil(summary["time_ns"] / _clock_ns(args.width))
    beats_in = summary["host_to_switch"]["beats"]
    report = {
        "engine": args.engine, "class": args.traffic_class, "status": summary["status"], "match": summary["match"],
        "workers": args.workers, "jobs": args.jobs, "bytes": nbytes, "mtu": args.mtu, "dtype": args.dtype,
        "width": args.width, "ports": args.ports, "seed": args.seed,
        "host_to_switch": summary["host_to_switch"], "switch_to_host": summary["switch_to_host"],
        "retransmissions": summary["retransmissions"], "credit_requests": summary["credit_requests"],
        "drops": summary["drops"], "clocks": clocks, "simulated_ns": summary["time_ns"],
        "throughput_beats_per_clock_per_port": round(beats_in / max(clocks, 1) / args.ports, 4),
        "counters": summary["switch"], "errors": summary["errors"],
        "wall_seconds": round(time.monotonic() - started, 3),
    }
    if args.traffic_class == "lossy":
        report.update(summary["lossy"])
    if args.dump:
        _dump(args, pairs)
    print(json.dumps(report))
    return 0 if report["match"] else 1


def _clock_ns(width):
    from ..host.network import CLOCK_NS
    return CLOCK_NS[width]


def _check_class(args):
    """The options of the bounded-loss class go with ``--class lossy``."""
    if args.traffic_class != "lossy":
        for given, flag in ((args.deadline_us is not None, "--deadline-us"),
                            (args.loss_bound is not None, "--loss-bound"), (not args.rescale, "--no-rescale")):
            if given:
                raise UserError(f"{flag} needs --class lossy")
        return
    if args.workers > 32:
        raise UserError(f"--class lossy takes at most 32 workers (the contributor bitmap is 32 bits), not "
                        f"{args.workers}")
    if args.message_slots < 2:
        raise UserError("--class lossy needs --message-slots of at least 2 (its window is half of them)")


def _lossy_options(args):
    """``build_allreduce``'s options of the bounded-loss class (none for the reliable class)."""
    from ..host.network import default_deadline_us
    if args.traffic_class != "lossy":
        return {}
    deadline_us = args.deadline_us
    if deadline_us is None:
        deadline_us = default_deadline_us(workers=args.workers, jobs=args.jobs, mtu=args.mtu,
                                          message_slots=args.message_slots, width=args.width)
    return {"traffic_class": "lossy", "deadline_us": deadline_us,
            "loss_bound": 0.01 if args.loss_bound is None else args.loss_bound, "rescale": args.rescale}


def _run_model(args, nbytes, inputs, spec):
    """The golden model as the switch: ``(summary, {(job, worker): (input, result[, contributors])})``."""
    import numpy as np

    from ..host.network import build_allreduce, expected_sum, lossy_report, lossy_results_match
    lossy = _lossy_options(args)
    network, jobs, inputs = build_allreduce(
        workers=args.workers, nbytes=nbytes, mtu=args.mtu, dtype=args.dtype, jobs=args.jobs, ports=args.ports,
        message_packets=args.message_packets, message_slots=args.message_slots, seed=args.seed, inputs=inputs,
        faults_up=spec, faults_down=spec, width=args.width, start_psn=args.start_psn, start_msg=args.start_msg,
        pcap=args.pcap, **lossy)
    total = sum(w.messages for w in network.workers)
    with _Progress(total) as progress:
        try:
            status = network.run(time_limit_ns=int(args.time_limit_ms * 1e6), progress=progress.update)
        finally:
            network.close()
    summary = network.summary()
    match = status == "done"
    if lossy:
        summary["match"] = match and lossy_results_match(network, inputs)
        summary["lossy"] = lossy_report(network, inputs, summary, lossy)
        return summary, {(w.job.job, w.index): (inputs[w.job.job][w.index], w.result, w.contributors)
                         for w in network.workers}
    for job in jobs:
        expected = expected_sum(job, inputs[job.job])
        match = match and all(np.array_equal(w.result, expected) for w in network.workers if w.job is job)
    summary["match"] = bool(match)
    return summary, {(w.job.job, w.index): (inputs[w.job.job][w.index], w.result) for w in network.workers}


def _run_rtl(args, nbytes, inputs):
    """The generated Verilog of ``NetReduceSwitch`` as the switch, on Verilator through cocotb
    (``tb/switch_tb.py``, testcase ``closed_loop``)."""
    import dataclasses
    import pickle
    import tempfile

    from ..hw.switch import NetReduceSwitch
    from ..sim.runner import SimulationError
    from ..tb.harness import run_switch
    from ..tb.scenarios import MANAGEMENT
    try:
        # with the testbenches' in-band control plane on the last port (unused here), so that a run with
        # a testbench build's parameters takes that build
        switch = NetReduceSwitch(width=args.width, workers=args.workers, jobs=args.jobs, dtype=args.dtype,
                                 mtu=args.mtu, message_packets=args.message_packets,
                                 message_slots=args.message_slots, ports=args.ports,
                                 management=dataclasses.replace(MANAGEMENT, manager_ingress=args.ports - 1))
    except ValueError as error:
        raise UserError(str(error)) from None
    print("netreduce: simulating the generated Verilog (the first build of a configuration takes minutes)",
          file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        params = {"out": str(scratch / "summary.json"), "dump": str(scratch / "dump.pickle"),
                  "job_workers": args.workers, "bytes": nbytes, "mtu": args.mtu, "dtype": args.dtype,
                  "job_count": args.jobs, "message_packets": args.message_packets,
                  "message_slots": args.message_slots, "seed": args.seed, "loss": args.loss, "dup": args.dup,
                  "reorder": args.reorder, "corrupt": args.corrupt, "start_psn": args.start_psn,
                  "start_msg": args.start_msg, "time_limit_ns": int(args.time_limit_ms * 1e6),
                  "lossy": _lossy_options(args)}
        if args.pcap:
            params["pcap"] = str(Path(args.pcap).resolve())      # the simulation runs in the build folder
        if inputs is not None:
            (scratch / "inputs.pickle").write_bytes(pickle.dumps(inputs))
            params["inputs"] = str(scratch / "inputs.pickle")
        try:
            run_switch(switch, testcase="closed_loop", params=params, quiet=True,
                       waves=Path(args.waves).resolve() if args.waves else None)
        except SimulationError as error:
            raise UserError(f"the RTL simulation failed: {error}") from None
        finally:
            if args.waves:      # empty (run() made it) unless the simulator's waveform was moved there
                print(f"netreduce: waveform in {args.waves}" if Path(args.waves).stat().st_size
                      else "netreduce: the simulation wrote no waveform", file=sys.stderr)
        summary = json.loads((scratch / "summary.json").read_text())
        pairs = pickle.loads((scratch / "dump.pickle").read_bytes())
    return summary, pairs


def _dump(args, pairs):
    import numpy as np
    view = _bit_view(args.dtype)
    arrays = {}
    for (job, worker), (source, result, *contributors) in sorted(pairs.items()):
        key = f"job{job}_worker{worker}"
        arrays[f"{key}_input"] = source.view(view) if view else source
        arrays[f"{key}_result"] = result.view(view) if view else result
        if contributors:
            arrays[f"{key}_contributors"] = contributors[0].astype(np.uint32)
    try:
        np.savez(args.dump, **arrays)
    except OSError as error:
        raise UserError(f"cannot write {args.dump}: {error.strerror}") from None


class _Progress:
    """A progress bar of received messages on standard error, shown once a run takes more than 2 s."""

    def __init__(self, total):
        from tqdm import tqdm
        self.bar = tqdm(total=total, unit="msg", delay=2.0, file=sys.stderr, leave=False,
                        disable=None)      # None: only on a terminal
        self.seen = 0
        self.calls = 0

    def update(self, network):
        self.calls += 1
        if self.calls % 256:
            return
        received = sum(len(w.received) + len(getattr(w, "filled", ())) for w in network.workers)
        if received > self.seen:
            self.bar.update(received - self.seen)
            self.seen = received

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
