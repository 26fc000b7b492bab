"""Launch tb/switch_tb.py: all-reduce traffic recorded on the golden model, replayed into the generated
Verilog of NetReduceSwitch and compared frame for frame, byte for byte, and counter for counter."""

import pickle

import pytest

from netreduce.host.faults import FaultSpec
from netreduce.host.network import ModelEngine, build_allreduce
from netreduce.hw.switch import NetReduceSwitch
from netreduce.sim.runner import run_cocotb


def record(**kwargs):
    """Run an all-reduce on the golden model and keep what reached and left the switch."""
    network, jobs, _ = build_allreduce(engine=lambda config: ModelEngine(config, record=True), **kwargs)
    status = network.run()
    assert status == "done"
    engine = network.engine
    return {"config": network.switch_config, "inputs": engine.inputs, "outputs": engine.outputs,
            "counters": dict(engine.counters)}


def run_switch(tmp_path, scenario, *, width, workers, jobs=2, idle=0.0, backpressure=0.0, seed=0):
    job = scenario["config"].jobs[0]
    switch = NetReduceSwitch(width=width, workers=workers, jobs=jobs, dtype=job.dtype, mtu=job.mtu,
                             message_packets=job.message_packets, message_slots=job.message_slots,
                             max_frame=scenario["config"].max_frame)
    path = tmp_path / "scenario.pickle"
    path.write_bytes(pickle.dumps(scenario))
    run_cocotb(switch, name="netreduce_switch", test_module="netreduce.tb.switch_tb",
               build_params=switch.parameters, params={"scenario": str(path), "workers": workers,
                                                       "idle": idle, "backpressure": backpressure,
                                                       "seed": seed})


@pytest.mark.parametrize("width", [64, 512])
def test_clean_allreduce(tmp_path, width):
    scenario = record(workers=3, nbytes=3000, mtu=256, message_packets=4, message_slots=2, seed=1)
    run_switch(tmp_path, scenario, width=width, workers=4)
