"""The register map (netreduce.registers) and what is generated from it: the decoder of the RTL (hw/csr.py,
in amaranth.sim), the table in docs/ARCHITECTURE.md, the configuration writes; and no module of hw/
imports the golden model."""

import ast
import random
from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.sim import Simulator

from netreduce.hw.csr import csr_signature, decode_registers
from netreduce.registers import (
    BLOCKS,
    READ_LATENCY,
    address,
    block,
    check_map,
    counter_address,
    instances,
    markdown_table,
    register_writes,
    switch_config_writes,
    vlan_word,
)
from netreduce.sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig

from references import write_registers

REPO = Path(__file__).resolve().parent.parent
PARAMS = {"jobs": 2, "workers": 3, "forwarding_entries": 4, "ports": 2, "ethernet": True}
LARGEST = {"jobs": 16, "workers": 16, "forwarding_entries": 64, "ports": 4, "ethernet": True}


def test_docs_table_is_the_generated_one():
    assert markdown_table() in (REPO / "docs" / "ARCHITECTURE.md").read_text()


def test_no_two_registers_share_a_word_in_the_largest_build():
    owners = check_map(LARGEST)
    assert len(owners) == sum(instances(b, LARGEST) * sum(r.words for r in b.registers) for b in BLOCKS)
    with pytest.raises(ValueError, match="outside the address space"):
        check_map({**LARGEST, "forwarding_entries": 1 << 14})


def test_register_writes_split_wide_registers_and_check_widths():
    assert register_writes("connection", 1, requester_mac=0x0A0B0C0D0E0F) == [
        (address("connection", 1, "requester_mac"), 0x0C0D0E0F),
        (address("connection", 1, "requester_mac") + 1, 0x0A0B)]
    with pytest.raises(ValueError, match="does not fit"):
        register_writes("connection", 0, start_psn=1 << 24)
    with pytest.raises(ValueError, match="read only"):
        register_writes("counters", 0, frames_in=1)
    assert vlan_word(None) == 0 and vlan_word(5) == 0x1005


class Decoded(wiring.Component):
    """Every register of the map as a signal of its own, decoded by ``decode_registers``."""

    def __init__(self, params):
        self.params = params
        self.targets = {f"{b.name}.{r.name}": [Signal(r.bits, name=f"{b.name}_{i}_{r.name}")
                                               for i in range(instances(b, params))]
                        for b in BLOCKS for r in b.registers if r.access != "ro"}
        # every read-only register: one value per instance (``readable`` takes a block of one instance's bare)
        self.values = {f"{b.name}.{r.name}": [Signal(32, name=f"ro_{b.name}_{i}_{r.name}")
                                              for i in range(instances(b, params))]
                       for b in BLOCKS for r in b.registers if r.access == "ro"}
        super().__init__({"csr": In(csr_signature())})

    def elaborate(self, platform):
        m = Module()
        readable = {key: values if block(key.split(".")[0]).count is not None else values[0]
                    for key, values in self.values.items()}
        self.strobes = decode_registers(m, self.csr, self.params, self.targets, readable)
        self.strobe_seen = {key: Signal(len(s), name=f"seen_{key.replace('.', '_')}")
                            for key, s in self.strobes.items()}
        for key, strobe in self.strobes.items():
            m.d.sync += self.strobe_seen[key].eq(self.strobe_seen[key] | strobe)
        return m


def test_decoder_writes_every_register_and_reads_every_counter():
    """Each register of each instance gets a random value through the port, at the map's addresses; every
    other register keeps its value; each read-only register of each instance (the counters, each port's
    egress and MAC counters) reads back at its address; every other word of the address space reads 0."""
    dut = Decoded(PARAMS)
    rng = random.Random(1)
    values = {(key, i): rng.getrandbits(len(sig)) for key, sigs in dut.targets.items() for i, sig in enumerate(sigs)}
    counts = {(key, i): rng.getrandbits(32) for key, sigs in dut.values.items() for i in range(len(sigs))}

    async def bench(ctx):
        for (key, i), value in counts.items():
            ctx.set(dut.values[key][i], value)
        writes = []
        for (key, i), value in values.items():
            block, register = key.split(".")
            writes += register_writes(block, i, **{register: value})
        await write_registers(ctx, dut.csr, writes)
        await ctx.tick()
        for (key, i), value in values.items():
            assert ctx.get(dut.targets[key][i]) == value, (key, i)
        for key, seen in dut.strobe_seen.items():
            assert ctx.get(seen) == (1 << len(seen)) - 1, key
        # every word of the address space up to past the last block, an address a clock: a read-only register
        # reads its value READ_LATENCY clocks after its address, any other word (configuration, unmapped) 0
        reads = {address(*key.split(".")[:1], i, key.split(".")[1]): value for (key, i), value in counts.items()}
        last = max(check_map(PARAMS))
        addresses = list(range(last + 0x100))
        for clock, at in enumerate(addresses + [0] * (READ_LATENCY - 1)):
            ctx.set(dut.csr.addr, at)
            await ctx.tick()
            if clock >= READ_LATENCY - 1:
                read = addresses[clock - (READ_LATENCY - 1)]
                assert ctx.get(dut.csr.rdata) == reads.get(read, 0), hex(read)
        assert counter_address("acks_ahead") == address("counters", 0, "acks_ahead")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_decoder_refuses_a_design_that_disagrees_with_the_map():
    dut = Decoded(PARAMS)
    dut.targets.pop("job.start_msg")
    with pytest.raises(ValueError, match="job.start_msg"):
        dut.elaborate(None)
    dut = Decoded(PARAMS)
    dut.targets["job.extra"] = [Signal(), Signal()]
    with pytest.raises(ValueError, match="job.extra"):
        dut.elaborate(None)


def test_switch_config_writes_put_a_job_before_its_connections():
    config = SwitchConfig(ports=2, forwarding={"02:00:00:00:00:01": 1},
                          jobs=[JobConfig(job=7, workers=1, start_msg=5)],
                          connections=[ConnectionConfig(7, 0, "02:00:00:00:00:01", "10.0.0.1", 0x11,
                                                        "02:00:00:00:00:02", "10.0.0.2", 0x22, 9,
                                                        requester_port=1, requester_vlan=3)])
    writes = dict(switch_config_writes(config, workers=4))
    assert writes[address("job", 0, "start_msg")] == 5
    assert writes[address("connection", 0, "requester_port")] == 1
    assert writes[address("connection", 0, "requester_vlan")] == 0x1003
    assert writes[address("connection", 0, "responder_vlan")] == 0
    order = [at for at, _ in switch_config_writes(config, workers=4)]
    assert order.index(address("job", 0, "enable")) < order.index(address("connection", 0, "enable"))
    assert order.index(address("connection", 0, "start_psn")) < order.index(address("connection", 0, "enable"))


def test_no_hardware_module_imports_the_golden_model():
    for path in (REPO / "hw").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                modules = ["." * node.level + (node.module or "")]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                assert "sim" not in module.split("."), f"{path.name} imports {module}"
