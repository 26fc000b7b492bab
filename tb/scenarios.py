"""The switch builds and recorded scenarios that the switch testbench's launchers share
(tests/test_tb_switch.py, benchmarks/bench_sim.py): each build is one Verilator build, reused by every
scenario replayed into it."""

import pickle

from ..host.network import ModelEngine, build_allreduce
from ..hw.switch import NetReduceSwitch
from .harness import run_switch

__all__ = ["SWITCH_BUILDS", "record", "switch_of", "replay"]

# binary32 at 64 bits (8 workers, 2 jobs, 2 ports) and at 512 bits (4 workers, 2 jobs, 1 port), bfloat16
# and binary16 at 64 bits (1 port); every build has room for a 4096-byte MTU (each job's MTU is a
# control register), 4-packet messages and a window of 4 messages
SWITCH_BUILDS = {
    "fp32x64": dict(width=64, workers=8, jobs=2, dtype="fp32", ports=2),
    "fp32x512": dict(width=512, workers=4, jobs=2, dtype="fp32"),
    "bf16x64": dict(width=64, workers=4, jobs=1, dtype="bf16"),
    "fp16x64": dict(width=64, workers=4, jobs=1, dtype="fp16"),
}
MTU, MESSAGE_PACKETS, MESSAGE_SLOTS = 4096, 4, 4


def record(setup=None, **kwargs):
    """Run an all-reduce on the golden model (4-packet messages, 4 message slots) and keep what reached
    the switch and what it sent; ``setup(network)`` may add traffic before it runs."""
    network, _, _ = build_allreduce(engine=lambda config: ModelEngine(config, record=True),
                                    message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS, **kwargs)
    if setup is not None:
        setup(network)
    status = network.run(time_limit_ns=10**10)
    return {"status": status, **network.engine.recording()}


def switch_of(build, max_frame=9216):
    return NetReduceSwitch(**SWITCH_BUILDS[build], mtu=MTU, message_packets=MESSAGE_PACKETS,
                           message_slots=MESSAGE_SLOTS, max_frame=max_frame)


def replay(folder, scenario, build, *, testcase="scenario_against_model", build_root=None, quiet=False,
           **params):
    """Replay ``scenario`` into ``build`` (tb/switch_tb.py, ``testcase``), its pickle in ``folder``."""
    path = folder / "scenario.pickle"
    path.write_bytes(pickle.dumps(scenario))
    run_switch(switch_of(build, scenario["config"].max_frame), testcase=testcase, build_root=build_root,
               quiet=quiet, params={"scenario": str(path), **params})
