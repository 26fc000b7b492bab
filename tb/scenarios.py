"""The switch builds and recorded scenarios that the switch testbench's launchers share
(tests/test_tb_switch.py, benchmarks/bench_sim.py): each build is one Verilator build, reused by every
scenario replayed into it."""

import dataclasses
import pickle

from ..host.management import Manager, management_address
from ..host.network import CLOCK_NS, ModelEngine, build_allreduce
from ..hw.switch import NetReduceSwitch
from ..registers import switch_config_writes
from ..sim.switch_model import SwitchModel
from ..wire import ManagementOp
from .harness import run_switch

__all__ = ["SWITCH_BUILDS", "MANAGEMENT", "record", "record_in_band", "switch_of", "replay"]

# the in-band control plane of the builds that have one: the switch's management address and its manager,
# on the build's last port
MANAGEMENT = management_address(switch_mac="02:4e:52:00:00:fe", switch_ip="10.0.255.254",
                                manager_mac="02:00:00:00:99:01", manager_ip="10.0.99.1", manager_port=5000)

# binary32 at 64 bits (8 workers, 2 jobs, 2 ports) and at 512 bits (4 workers, 2 jobs, 1 port), bfloat16 and binary16
# at 64 bits (1 port), binary32 with four 64-bit ports into the 512-bit core, with two into the 256-bit core and with
# two 512-bit ports into the 1,024-bit core; every build has room for a 4096-byte MTU (each job's MTU is a control
# register), 4-packet messages and a window of 4 messages
SWITCH_BUILDS = {
    "fp32x64": dict(width=64, workers=8, jobs=2, dtype="fp32", ports=2,
                    management=dataclasses.replace(MANAGEMENT, manager_ingress=1)),
    "fp32x512": dict(width=512, workers=4, jobs=2, dtype="fp32", management=dataclasses.replace(MANAGEMENT,
                                                                                                manager_ingress=0)),
    "bf16x64": dict(width=64, workers=4, jobs=1, dtype="bf16"),
    # 64-bit ports into the 512-bit core (hw.gearbox), every port at line rate at once
    "fp32x512p64": dict(width=512, port_width=64, workers=4, jobs=2, dtype="fp32", ports=4),
    # two 64-bit ports into the 256-bit core: the same at the size of a mid-range FPGA
    "fp32x256p64": dict(width=256, port_width=64, workers=4, jobs=2, dtype="fp32", ports=2),
    # two 512-bit ports into the 1,024-bit core (frames of an even number of port beats at line rate on both)
    "fp32x1024p512": dict(width=1024, port_width=512, workers=4, jobs=2, dtype="fp32", ports=2),
    "fp16x64": dict(width=64, workers=4, jobs=1, dtype="fp16", ipv6=False),   # (without IPv6 RoCE)
}
MTU, MESSAGE_PACKETS, MESSAGE_SLOTS = 4096, 4, 4


def record(setup=None, **kwargs):
    """Run an all-reduce on the golden model (4-packet messages, 4 message slots) and keep what reached
    the switch and what it sent; ``setup(network)`` may add traffic before it runs."""
    clock_ns = CLOCK_NS[kwargs.get("width", 64)]
    network, _, _ = build_allreduce(engine=lambda config: ModelEngine(config, record=True, clock_ns=clock_ns),
                                    message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS, **kwargs)
    if setup is not None:
        setup(network)
    status = network.run(time_limit_ns=10**10)
    return {"status": status, **network.engine.recording()}


def record_in_band(build, reads=(), writes=(), setup=None, **kwargs):
    """:func:`record`, with the switch of ``build`` leaving reset and configured by its manager through
    management packets (on its port), each request sent once the reply to the one before has left (a write
    takes effect before its reply: docs "In-band control plane"), ``writes`` (``(address, word)``) after the
    configuration, the all-reduce's frames after the last reply; once the run is over, the manager reads the
    registers at ``reads``."""
    switch = switch_of(build)
    switch._MustUse__silence = True             # described, not built
    params, management = switch.parameters, switch.management
    manager, port = Manager(management), management.manager_ingress

    def engine(config):
        recorder = ModelEngine(config, record=True)
        recorder.model = SwitchModel.managed(params, management)
        for index, (word_address, word) in enumerate(switch_config_writes(config, params["workers"]) + list(writes)):
            recorder.inject(port, manager.request(ManagementOp.WRITE, word_address, word)[1], 0, after=index)
        return recorder
    network, _, _ = build_allreduce(engine=engine, message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS,
                                    **kwargs)
    recorder = network.engine
    replies = len(recorder.inputs)
    if setup is not None:
        setup(network)
    status = network.run(time_limit_ns=10**10)
    recorder.after[replies:] = [after + replies for after in recorder.after[replies:]]   # the replies left first
    for word_address in reads:
        recorder.inject(port, manager.request(ManagementOp.READ, word_address)[1], network.now,
                        after=sum(map(len, recorder.outputs)))
    return {"status": status, "in_band": True, **recorder.recording()}


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
