"""amaranth.sim unit test of hw/switch/management.py (``ManagementAgent``): requests handed over with random
idle clocks, replies taken with random backpressure, at both widths. Each request is one operation on the
register port, SETTLE clocks after it is taken (a write with its word, or a read whose word the register
port shows READ_LATENCY clocks after), and one reply, equal byte for byte to the host library's
(``build_management_frame``), out of the port the request came in on, in the egress stage's control class."""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from netreduce.host.management import ManagementMessage, build_management_frame, management_address
from netreduce.hw.switch.management import SETTLE, ManagementAgent
from netreduce.registers import READ_LATENCY
from netreduce.wire import CONTROL_DSCP, ManagementOp

ADDRESS = management_address(switch_mac="02:4e:52:00:00:fe", switch_ip="10.0.255.254",
                             manager_mac="02:00:00:00:99:01", manager_ip="10.0.99.1", manager_port=5000)
PORTS = 3


def register_word(address):
    """What the register port shows at ``address`` in this test."""
    return (address * 0x9E3779B1 + 7) & 0xFFFFFFFF


@pytest.mark.parametrize("width", [64, 512])
def test_requests_become_operations_and_replies(width):
    rng = random.Random(width)
    dut = ManagementAgent(width, ADDRESS, PORTS)
    requests = [{"write": rng.random() < 0.5, "sequence": rng.randrange(1 << 16), "address": rng.randrange(1 << 16),
                 "value": rng.randrange(1 << 32), "port": rng.randrange(PORTS)} for _ in range(12)]
    operations, replies = [], []

    async def offer(ctx):
        for request in requests:
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            ctx.set(dut.request.payload, dut.Request.const(request))
            ctx.set(dut.request.valid, 1)
            await ctx.tick().until(dut.request.ready)
            ctx.set(dut.request.valid, 0)

    async def registers(ctx):
        """The register port: a write is noted, a read shows its word READ_LATENCY clocks after its address
        (a word the agent did not ask for, 0xBAD, in every other clock)."""
        clock = 0
        asked = deque([None] * (READ_LATENCY - 1))
        async for _, _, owns, addr, we, wdata in ctx.tick().sample(dut.owns_csr, dut.csr.addr, dut.csr.we,
                                                                   dut.csr.wdata):
            clock += 1
            asked.append(addr if owns else None)
            shown = asked.popleft()
            ctx.set(dut.csr.rdata, 0xBAD if shown is None else register_word(shown))
            if owns:
                operations.append((clock, addr, we, wdata if we else None))

    async def take(ctx):
        frame, ports, sent = b"", set(), 0
        while len(replies) < len(requests):
            ctx.set(dut.o.ready, rng.random() < 0.6)
            valid, ready, beat, went = (ctx.get(dut.o.valid), ctx.get(dut.o.ready), ctx.get(dut.o.payload),
                                        ctx.get(dut.sent))
            await ctx.tick()
            sent += went
            if valid and ready:
                assert beat.dscp == CONTROL_DSCP and beat.lossy == 0 and beat.first == (frame == b"")
                frame += bytes((beat.data >> 8 * i) & 0xFF for i in range(width // 8) if beat.keep >> i & 1)
                ports.add(beat.port)        # (every beat of a reply names its port)
                if beat.last:
                    (port,) = ports
                    replies.append((port, frame))
                    frame, ports = b"", set()
        assert sent == len(requests)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(offer, background=True)
    sim.add_process(registers)
    sim.add_testbench(take)
    sim.run()

    assert len(operations) == len(requests)
    for request, (_, addr, we, wdata), (port, frame) in zip(requests, operations, replies, strict=True):
        assert (addr, we, wdata) == (request["address"], request["write"],
                                     request["value"] if request["write"] else None)
        value = request["value"] if request["write"] else register_word(request["address"])
        op = ManagementOp.WRITE if request["write"] else ManagementOp.READ
        expected = build_management_frame(ManagementMessage(op, request["sequence"], request["address"], value,
                                                            reply=True), ADDRESS)
        assert (port, frame) == (request["port"], expected)
    assert SETTLE >= 3          # the monitor's counters land two clocks after its commit
