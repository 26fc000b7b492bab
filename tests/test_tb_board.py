"""Launch tb/board_tb.py: the switch behind its board's 1 Gb/s Ethernet ports in generated Verilog on
Verilator, with cocotbext-eth's PHY models on both ports, configured in-band by its manager on port 1,
under an all-reduce of emulated RoCE workers: on GMII (``SwitchOnGmii``: MAC, framing, clock-domain
crossings) with and without loss, and on the RGMII pins (``SwitchOnRgmii``: the same through ``Rgmii`` on
the ECP5's DDR primitives, modelled in tb/ecp5_primitives.v), where bad input then gets its outcome."""

import dataclasses
from pathlib import Path

import pytest

import netreduce.tb
from netreduce.hw.boards import SwitchOnGmii, SwitchOnRgmii
from netreduce.sim.runner import run_cocotb
from netreduce.tb.scenarios import MANAGEMENT

pytestmark = pytest.mark.slow(minutes=2)

# (without the bounded-loss class, as the Versa's default build: the switch's reliable class alone, end to end)
BUILD = dict(workers=4, jobs=1, mtu=1024, message_packets=4, message_slots=4, max_frame=2048, ipv6=False,
             egress_buffer=8192, forwarding_entries=8, bounded_loss=False)
ADDRESS = dataclasses.replace(MANAGEMENT, manager_ingress=1)
RUN = {"ports": 2, "workers": BUILD["workers"], "forwarding_entries": BUILD["forwarding_entries"],
       "job_workers": 4, "mtu": 1024, "message_packets": 4, "message_slots": 4, "seed": 3, "sync_ns": 20,
       "time_limit_ns": 20_000_000}


@pytest.mark.parametrize("loss", [0.0, pytest.param(0.05, marks=pytest.mark.build_leader)])   # leads switch_on_gmii
def test_allreduce_through_the_macs(loss):
    top = SwitchOnGmii(2, **BUILD, management=ADDRESS)
    run_cocotb(top, name="switch_on_gmii", test_module="netreduce.tb.board_tb", testcase="allreduce_over_gmii",
               build_params={"ports": 2, **BUILD, "management": dataclasses.asdict(ADDRESS)},
               params={**RUN, "bytes": 16384, "loss": loss}, quiet=True)


@pytest.mark.build_leader       # of switch_on_rgmii
def test_allreduce_and_bad_frames_through_the_rgmii_pins():
    top = SwitchOnRgmii(2, **BUILD, management=ADDRESS)
    run_cocotb(top, name="switch_on_rgmii", test_module="netreduce.tb.board_tb",
               testcase="allreduce_and_bad_frames_over_rgmii",
               build_params={"ports": 2, **BUILD, "management": dataclasses.asdict(ADDRESS)},
               params={**RUN, "bytes": 4096, "loss": 0.0, "jumbo": 9000},
               extra_sources=[Path(netreduce.tb.__file__).parent / "ecp5_primitives.v"], quiet=True)
