"""cocotb testbenches of the switch behind its board's Ethernet ports (hw/boards.py), with cocotbext-eth's PHY
models on every port: ``SwitchOnGmii`` on GMII, ``SwitchOnRgmii`` on the RGMII pins (the ECP5's DDR
primitives, tb/ecp5_primitives.v), both at 1 Gb/s.

Launched by tests/test_tb_board.py. Emulated RoCE workers (``netreduce.host.network``, with the
parameters' faults) run an all-reduce through the generated Verilog: each frame a host sends goes onto
its port's receive side through the PHY model's source (preamble, FCS) as soon as the PHY is free, and every
frame the switch sends is taken from the transmit side by its sink and handed back to the network. The
switch is configured as on a board, in-band: its manager (on port ``management.manager_ingress``) writes the
configuration through management packets, each once the reply to the one before is back. Passes when
every reply came, every worker holds the exact tree sum and every frame out had a right FCS and no error.

On RGMII, bad input then gets its documented outcome (docs/ARCHITECTURE.md, "Boards"): a frame with a wrong
FCS, a runt and a frame longer than the port takes are dropped at the port's MAC and counted there (the MAC
counters of both ports read in-band: the register map's ``ethernet`` block), and never reach the switch; a
management request from a stranger reaches it and is refused and counted (``management_refused``),
unanswered. Nothing else leaves any port.
"""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer, with_timeout
from cocotbext.eth import GmiiFrame, GmiiSink, GmiiSource, RgmiiPhy

from netreduce.host.faults import FaultSpec
from netreduce.host.management import ManagementMessage, Manager, build_management_frame
from netreduce.host.network import build_allreduce
from netreduce.host.packets import build_roce_frame
from netreduce.registers import ETHERNET_COUNTERS, address, counter_address, switch_config_writes
from netreduce.sim.runner import cocotb_params
from netreduce.tb.switch_tb import RtlEngine, results_match, run_network
from netreduce.wire import ManagementAddress, ManagementOp

GMII_NS = 8                 # 125 MHz: a byte a clock, 1 Gb/s


class Ports:
    """The PHY models' sources (frames into the switch) and sinks (frames out) of every port."""

    def __init__(self, sources, sinks):
        self.sources, self.sinks = sources, sinks

    async def send(self, port, frame):
        await self.sources[port].send(frame if isinstance(frame, GmiiFrame) else GmiiFrame.from_payload(frame))

    async def receive(self, port):
        return await self.sinks[port].recv()


async def exchange(ports, manager, port, op, register, value=0):
    """One management request and its reply (the reply's value)."""
    sequence, request = manager.request(op, register, value)
    await ports.send(port, request)
    reply = await with_timeout(ports.receive(port), 200, "us")
    message = manager.accept(bytes(reply.get_payload()), sequence)
    assert message is not None, f"no reply to {op.name} {register:#06x}"
    return message.value


async def allreduce(dut, params, ports):
    """Configure the switch in-band and run the all-reduce (module documentation); returns the manager and its
    port."""
    spec = FaultSpec(loss=params.get("loss", 0.0))
    network, jobs, inputs = build_allreduce(
        workers=params["job_workers"], nbytes=params["bytes"], mtu=params["mtu"], dtype="fp32", jobs=1,
        message_packets=params["message_packets"], message_slots=params["message_slots"], seed=params["seed"],
        faults_up=spec, faults_down=spec, width=64, ports=params["ports"], engine=RtlEngine)
    management = ManagementAddress(**params["management"])
    manager, port = Manager(management), management.manager_ingress
    for word_address, word in switch_config_writes(network.switch_config, params["workers"]):
        await exchange(ports, manager, port, ManagementOp.WRITE, word_address, word)
    bad_fcs = []

    async def receive(port):
        frame = await ports.receive(port)
        if not frame.check_fcs() or frame.error:
            bad_fcs.append(port)
        return bytes(frame.get_payload())

    now = await run_network(dut, network, ports.send, receive, params["ports"], params["time_limit_ns"],
                            poll_clocks=16)
    summary = network.summary()
    network.close()
    match = results_match(network, jobs, inputs)
    dut._log.info("%s", json.dumps({"status": network.status, "match": match, "clocks": now() // GMII_NS,
                                    "frames_to_switch": summary.get("frames_to_switch")}))
    assert not bad_fcs, f"frames out with a bad FCS or an error on ports {sorted(set(bad_fcs))}"
    assert network.status == "done", f"the all-reduce did not finish: {network.status}"
    assert match, "a worker's result differs from the tree sum"
    return manager, port


async def reset(dut, resets, clock):
    for signal in resets:
        signal.value = 1
    await ClockCycles(clock, 10)
    for signal in resets:
        signal.value = 0
    await ClockCycles(clock, 10)


@cocotb.test()
async def allreduce_over_gmii(dut):
    params = cocotb_params()
    ports = params["ports"]
    Clock(dut.clk, params["sync_ns"], unit="ns").start()
    Clock(dut.tx_clk, GMII_NS, unit="ns").start()
    for p in range(ports):
        Clock(getattr(dut, f"rx_clk__{p}"), GMII_NS, unit="ns").start(start_high=p % 2 == 0)
    sources = [GmiiSource(getattr(dut, f"gmii__{p}__rxd"), getattr(dut, f"gmii__{p}__rx_er"),
                          getattr(dut, f"gmii__{p}__rx_dv"), getattr(dut, f"rx_clk__{p}")) for p in range(ports)]
    sinks = [GmiiSink(getattr(dut, f"gmii__{p}__txd"), getattr(dut, f"gmii__{p}__tx_er"),
                      getattr(dut, f"gmii__{p}__tx_en"), dut.tx_clk) for p in range(ports)]
    await reset(dut, [dut.rst, dut.tx_rst] + [getattr(dut, f"rx_rst__{p}") for p in range(ports)], dut.clk)
    await allreduce(dut, params, Ports(sources, sinks))


@cocotb.test()
async def allreduce_and_bad_frames_over_rgmii(dut):
    params = cocotb_params()
    count = params["ports"]
    Clock(dut.clk, params["sync_ns"], unit="ns").start()
    Clock(dut.tx_clk, GMII_NS, unit="ns").start()

    def pin(p, name):
        return getattr(dut, f"rgmii{p}_{name}")
    phys = [RgmiiPhy(pin(p, "tx_data"), pin(p, "tx_ctl"), pin(p, "tx_clk"), pin(p, "rx_data"), pin(p, "rx_ctl"),
                     pin(p, "rx_clk"), speed=1000e6) for p in range(count)]
    ports = Ports([phy.rx for phy in phys], [phy.tx for phy in phys])
    await reset(dut, [dut.reset], dut.clk)
    manager, port = await allreduce(dut, params, ports)

    # bad input, on a port other than the manager's, once the all-reduce's last frames (ACKs the switch
    # forwards after the results) have left
    victim = (port + 1) % count
    await Timer(50, "us")
    for sink in ports.sinks:
        sink.clear()

    async def read(name):
        return await exchange(ports, manager, port, ManagementOp.READ, counter_address(name))

    async def mac_counters(p):       # the port's MAC, in-band too
        return {name: await exchange(ports, manager, port, ManagementOp.READ, address("ethernet", p, name))
                for name in ETHERNET_COUNTERS}
    before = await mac_counters(victim)
    manager_before = await mac_counters(port)
    frames_in, refused = await read("frames_in"), await read("management_refused")
    frame = build_roce_frame(0x0A, bytes(64), psn=1, reth=(0, 0, 64))
    await ports.send(victim, GmiiFrame.from_raw_payload(frame + b"\x00\x11\x22\x33"))             # a wrong FCS
    await ports.send(victim, GmiiFrame.from_payload(frame[:40], min_len=0))                         # a runt: 44 bytes
    await ports.send(victim, GmiiFrame.from_payload(frame + bytes(params["jumbo"] - len(frame))))   # too long
    stranger = ManagementAddress(**{**params["management"], "manager_mac": 0x02BAD0000001})
    await ports.send(victim, build_management_frame(ManagementMessage(ManagementOp.READ, 7, 0x200), stranger))
    await Timer(150, "us")          # the four frames take some 80 us on the wire
    after = await mac_counters(victim)
    assert {name: after[name] - before[name] for name in after} == {
        **dict.fromkeys(ETHERNET_COUNTERS, 0), "rx_drops_fcs": 1, "rx_drops_runt": 1, "rx_drops_oversize": 1,
        "rx_good": 1}, "the port's MAC did not drop exactly the bad FCS, the runt and the jumbo frame"
    # the manager's port: each counter read twice, 20 requests apart (the rest of the first read of its own
    # counters, frames_in and management_refused, the victim's counters, the start of the second read): as many
    # requests came in good between the two reads of rx_good, and as many replies went out between those of
    # tx_frames
    manager_after = await mac_counters(port)
    between = 2 * len(ETHERNET_COUNTERS) + 2
    assert manager_after["rx_good"] - manager_before["rx_good"] == between, \
        "the manager's port did not count its requests"
    assert manager_after["tx_frames"] - manager_before["tx_frames"] == between, \
        "the manager's port did not count its replies"
    assert manager_after["rx_drops_fcs"] == manager_after["tx_underruns"] == 0
    # the frames the switch took since the first read: the second read, the stranger's request, the reads of
    # both ports' MAC counters, this read
    assert await read("frames_in") == frames_in + 3 + 2 * len(ETHERNET_COUNTERS), "a bad frame reached the switch"
    assert await read("management_refused") == refused + 1, "the stranger's request was not refused"
    await Timer(20, "us")
    assert all(sink.empty() for sink in ports.sinks), "a frame left the switch after the bad input"
