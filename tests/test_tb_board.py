"""Launch tb/board_tb.py: the switch behind its board's 1 Gb/s Ethernet ports (MAC, framing, clock-domain
crossings: ``SwitchOnGmii``) in generated Verilog on Verilator, with cocotbext-eth's GMII PHY models on
both ports, configured in-band by its manager on port 1, under an all-reduce of emulated RoCE workers, with
and without loss."""

import dataclasses

import pytest

from netreduce.hw.boards import SwitchOnGmii
from netreduce.sim.runner import run_cocotb
from netreduce.tb.scenarios import MANAGEMENT

pytestmark = pytest.mark.slow(minutes=2)

BUILD = dict(workers=4, jobs=1, mtu=1024, message_packets=4, message_slots=4, max_frame=2048,
             egress_buffer=8192, forwarding_entries=8)
ADDRESS = dataclasses.replace(MANAGEMENT, manager_ingress=1)


@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_allreduce_through_the_macs(loss):
    top = SwitchOnGmii(2, **BUILD, management=ADDRESS)
    run_cocotb(top, name="switch_on_gmii", test_module="netreduce.tb.board_tb",
               build_params={"ports": 2, **BUILD, "management": dataclasses.asdict(ADDRESS)},
               params={"ports": 2, "workers": BUILD["workers"], "forwarding_entries": BUILD["forwarding_entries"],
                       "job_workers": 4, "bytes": 16384, "mtu": 1024, "message_packets": 4, "message_slots": 4,
                       "seed": 3, "loss": loss, "sync_ns": 20, "time_limit_ns": 20_000_000},
               quiet=True)
