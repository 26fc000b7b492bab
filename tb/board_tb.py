"""cocotb testbench of ``SwitchOnGmii`` (hw/boards.py): the switch behind its board's Ethernet ports, on
GMII at 1 Gb/s, with cocotbext-eth's GMII PHY models on every port.

Launched by tests/test_tb_board.py. Emulated RoCE workers (``netreduce.host.network``, with the
parameters' faults) run an all-reduce through the generated Verilog: each frame a host sends goes onto
its port's GMII receive side through ``GmiiSource`` (preamble, FCS) as soon as the PHY is free, and every
frame the switch sends is taken from the GMII transmit side by ``GmiiSink`` and handed back to the
network. The switch is configured as on a board, in-band: its manager (on port ``management.manager_ingress``)
writes the configuration through management packets, each once the reply to the one before is back. Passes
when every reply came, every worker holds the exact tree sum and every frame out had a right FCS and no
``tx_er``.
"""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.eth import GmiiFrame, GmiiSink, GmiiSource

from netreduce.host.faults import FaultSpec
from netreduce.host.management import Manager
from netreduce.host.network import build_allreduce
from netreduce.registers import switch_config_writes
from netreduce.sim.runner import cocotb_params
from netreduce.tb.switch_tb import RtlEngine, results_match, run_network
from netreduce.wire import ManagementAddress, ManagementOp

GMII_NS = 8                 # 125 MHz: a byte a clock, 1 Gb/s


@cocotb.test()
async def allreduce_over_gmii(dut):
    params = cocotb_params()
    ports = params["ports"]
    Clock(dut.clk, params["sync_ns"], unit="ns").start()
    Clock(dut.tx_clk, GMII_NS, unit="ns").start()
    for p in range(ports):
        Clock(getattr(dut, f"rx_clk__{p}"), GMII_NS, unit="ns").start(start_high=p % 2 == 0)
    resets = [dut.rst, dut.tx_rst] + [getattr(dut, f"rx_rst__{p}") for p in range(ports)]
    for reset in resets:
        reset.value = 1
    sources = [GmiiSource(getattr(dut, f"gmii__{p}__rxd"), getattr(dut, f"gmii__{p}__rx_er"),
                          getattr(dut, f"gmii__{p}__rx_dv"), getattr(dut, f"rx_clk__{p}")) for p in range(ports)]
    sinks = [GmiiSink(getattr(dut, f"gmii__{p}__txd"), getattr(dut, f"gmii__{p}__tx_er"),
                      getattr(dut, f"gmii__{p}__tx_en"), dut.tx_clk) for p in range(ports)]
    await ClockCycles(dut.clk, 10)
    for reset in resets:
        reset.value = 0
    await ClockCycles(dut.clk, 10)

    spec = FaultSpec(loss=params.get("loss", 0.0))
    network, jobs, inputs = build_allreduce(
        workers=params["job_workers"], nbytes=params["bytes"], mtu=params["mtu"], dtype="fp32", jobs=1,
        message_packets=params["message_packets"], message_slots=params["message_slots"], seed=params["seed"],
        faults_up=spec, faults_down=spec, width=64, ports=ports, engine=RtlEngine)
    management = ManagementAddress(**params["management"])
    manager, port = Manager(management), management.manager_ingress
    for word_address, word in switch_config_writes(network.switch_config, params["workers"]):
        sequence, request = manager.request(ManagementOp.WRITE, word_address, word)
        await sources[port].send(GmiiFrame.from_payload(request))
        reply = await with_timeout(sinks[port].recv(), 200, "us")
        assert manager.accept(bytes(reply.get_payload()), sequence) is not None, \
            f"no reply to the write of {word_address:#06x}"
    bad_fcs = []

    async def send(port, frame):
        await sources[port].send(GmiiFrame.from_payload(frame))

    async def receive(port):
        frame = await sinks[port].recv()
        if not frame.check_fcs() or frame.error:
            bad_fcs.append(port)
        return bytes(frame.get_payload())

    now = await run_network(dut, network, send, receive, ports, params["time_limit_ns"], poll_clocks=16)
    summary = network.summary()
    network.close()
    match = results_match(network, jobs, inputs)
    dut._log.info("%s", json.dumps({"status": network.status, "match": match, "clocks": now() // GMII_NS,
                                    "frames_to_switch": summary.get("frames_to_switch")}))
    assert not bad_fcs, f"frames out with a bad FCS or tx_er on ports {sorted(set(bad_fcs))}"
    assert network.status == "done", f"the all-reduce did not finish: {network.status}"
    assert match, "a worker's result differs from the tree sum"
