"""amaranth.sim unit test of hw/switch/registers.py (``SwitchRegisters``): a ``SwitchConfig`` loaded through
the ``csr`` port with the writes the register map generates comes out field for field in the records the
other components read (requester and responder not swapped, MTU capped at the build's), each enable
pulses its strobe once, and every counter adds its increments and reads back at its address; each port's
egress stage starts with the default map, takes its configuration writes (a queue past Q - 1 as Q - 1, a
queue the build lacks nowhere) and shows its stage's counters at that port's addresses; on a board, each
port's MAC counters read at that port's addresses."""

import random
from collections import deque

from amaranth.sim import Simulator

from netreduce.egress import CLASSES, OTHER_CLASS, Scheduling, default_dscp_classes
from netreduce.host.protocol import ip_to_int, mac_to_int
from netreduce.hw.egress import COUNTER_READ_LATENCY, EgressQueues
from netreduce.hw.switch.registers import SwitchRegisters
from netreduce.registers import (
    COUNTERS,
    EGRESS_COUNTERS,
    ETHERNET_COUNTERS,
    address,
    block,
    check_map,
    counter_address,
    instances,
    register_writes,
    switch_config_writes,
    vlan_word,
)
from netreduce.sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig

from references import read_register, write_registers

JOBS, WORKERS, ENTRIES, MTU = 2, 2, 4, 1024
EGRESS_NAMES = tuple(EGRESS_COUNTERS)       # the counters each egress stage keeps per class
PORTS, QUEUES = 2, 3


def egress_template():
    stage = EgressQueues(64, queues=QUEUES, depth_beats=512, max_frame=1024)
    stage._MustUse__silence = True      # only its configuration's and counters' shapes are used
    return stage


def config():
    connections = [ConnectionConfig(job, w, f"02:00:00:00:{job:02x}:{2 * w:02x}", f"10.{job}.0.{2 * w + 1}",
                                    0x100 + 8 * job + w, f"02:00:00:00:{job:02x}:{2 * w + 1:02x}",
                                    f"10.{job}.0.{2 * w + 2}", 0x200 + 8 * job + w, 77 * w + job,
                                    requester_port=w % 2, responder_port=(w + 1) % 2,
                                    requester_vlan=None if w else 12, responder_vlan=w * 30 or None)
                   for job in (3, 4) for w in range(2)]
    return SwitchConfig(mac="02:4e:52:00:00:07", ip="10.0.255.9", control_port=4800, ports=2, default_port=1,
                        forwarding={"02:00:00:00:03:00": 0, "02:00:00:00:03:01": 1},
                        jobs=[JobConfig(3, 2, mtu=512, start_msg=(1 << 32) - 2), JobConfig(4, 2, mtu=4096)],
                        connections=connections)


def class_counter_stages(dut, values):
    """A background process that stands for every port's egress stage: it shows on
    ``egress_status[p].counter_value`` the per-class counter that ``egress_counter_read`` named
    ``COUNTER_READ_LATENCY`` clocks before (``values``: ``{(p, name, c): value}``)."""
    async def stages(ctx):
        # (a process: what it sets after an edge stands for registers, what it samples is what they took)
        named = deque([None] * (COUNTER_READ_LATENCY - 1))
        async for _, _, index in ctx.tick().sample(dut.egress_counter_read):
            named.append(index)
            shown = named.popleft()
            kind, c = divmod(shown, CLASSES) if shown is not None else (len(EGRESS_NAMES), 0)
            name = EGRESS_NAMES[kind] if kind < len(EGRESS_NAMES) else None
            for p in range(len(dut.egress_status)):
                ctx.set(dut.egress_status[p].counter_value, values.get((p, name, c), 0))
    return stages


def test_configuration_comes_out_field_for_field_and_counters_add():
    cfg = config()
    rng = random.Random(2)
    stage = egress_template()
    dut = SwitchRegisters(jobs=JOBS, workers=WORKERS, forwarding_entries=ENTRIES, mtu=MTU, increment_bits=3,
                          egress=stage, ports=PORTS)
    egress_writes = (register_writes("egress", 1, dscp5_class=7, class2_queue=9, class2_droppable=0,
                                     class2_threshold=300, scheduling=1, quantum1=100, quantum9=55)
                     + register_writes("egress", 0, class18_queue=1))
    status = {(p, name, i): rng.getrandbits(32) for p in range(PORTS) for name in EGRESS_NAMES for i in range(CLASSES)}
    status.update({(p, "high_water", q): rng.getrandbits(32) for p in range(PORTS) for q in range(QUEUES)})
    status.update({(p, name, None): rng.getrandbits(9) for p in range(PORTS) for name in ("drops_oversize",
                                                                                         "occupancy")})
    increments = {name: [rng.randrange(8) for _ in range(5)] for name in COUNTERS}
    pulses = {"job": [0] * JOBS, "connection": [0] * (JOBS * WORKERS)}

    async def bench(ctx):
        assert ctx.get(dut.switch.control_port) == 4792 and ctx.get(dut.jobs[1].mtu) == MTU     # unconfigured
        for p in range(PORTS):
            assert ctx.get(dut.egress[p]) == ctx.get(dut.egress[p]).shape().const(stage.config_init)
        for (p, name, i), value in status.items():
            if name not in EGRESS_NAMES:
                ctx.set(dut.egress_status[p][name] if i is None else dut.egress_status[p][name][i], value)
        await write_registers(ctx, dut.csr, switch_config_writes(cfg, WORKERS) + egress_writes)
        for step in range(5):
            for name in COUNTERS:
                ctx.set(dut.increments[name], increments[name][step])
            await ctx.tick()
        for name in COUNTERS:
            ctx.set(dut.increments[name], 0)
        await ctx.tick().repeat(2)

        assert ctx.get(dut.switch.mac) == mac_to_int(cfg.mac) and ctx.get(dut.switch.ip) == ip_to_int(cfg.ip)
        assert ctx.get(dut.switch.control_port) == 4800 and ctx.get(dut.switch.default_port) == 1
        for e, (mac, port) in enumerate(cfg.forwarding.items()):
            entry = ctx.get(dut.forwarding[e])
            assert (entry.valid, entry.mac, entry.port) == (1, mac_to_int(mac), port)
        assert ctx.get(dut.forwarding[2].valid) == 0
        for j, job in enumerate(cfg.jobs):
            entry = ctx.get(dut.jobs[j])
            assert (entry.valid, entry.id, entry.workers, entry.start_msg) == (1, job.job, job.workers, job.start_msg)
            assert entry.mtu == min(job.mtu, MTU)
        for conn in cfg.connections:
            entry = ctx.get(dut.connections[(conn.job - 3) * WORKERS + conn.worker])
            assert (entry.valid, entry.start_psn) == (1, conn.start_psn)
            assert (entry.requester_qpn, entry.responder_qpn) == (conn.requester_qpn, conn.responder_qpn)
            for name in ("requester", "responder"):
                place = getattr(entry, name)
                assert place.mac == mac_to_int(getattr(conn, f"{name}_mac"))
                assert place.ip == ip_to_int(getattr(conn, f"{name}_ip"))
                assert place.port == getattr(conn, f"{name}_port")
                assert place.vlan == vlan_word(getattr(conn, f"{name}_vlan"))
        for name in COUNTERS:
            assert await read_register(ctx, dut.csr, counter_address(name)) == sum(increments[name]), name

        changed, kept = ctx.get(dut.egress[1]), ctx.get(dut.egress[0])
        defaults = default_dscp_classes()
        assert [changed.dscp_class[d] for d in range(64)] == [7 if d == 5 else defaults[d] for d in range(64)]
        assert [kept.dscp_class[d] for d in range(64)] == list(defaults)
        entry = changed.class_table[2]
        assert (entry.queue, entry.droppable, entry.threshold) == (QUEUES - 1, 0, 300)
        assert kept.class_table[OTHER_CLASS].queue == 1 and changed.class_table[OTHER_CLASS].queue == QUEUES - 1
        assert changed.scheduling == Scheduling.WEIGHTED and kept.scheduling == Scheduling.STRICT
        assert [changed.quantum[q] for q in range(QUEUES)] == [stage.max_frame_beats, 100, stage.max_frame_beats]
        for (p, name, i), value in status.items():
            at = address("egress", p, name if i is None else f"{name}{i}")
            assert await read_register(ctx, dut.csr, at) == value, (p, name, i)
        assert await read_register(ctx, dut.csr, address("egress", 1, f"high_water{QUEUES}")) == 0

    async def watch(ctx):
        async for _, _, jobs, connections in ctx.tick().sample(dut.job_enabled, dut.connection_enabled):
            for j in range(JOBS):
                pulses["job"][j] += jobs >> j & 1
            for c in range(JOBS * WORKERS):
                pulses["connection"][c] += connections >> c & 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(watch)
    sim.add_process(class_counter_stages(dut, status))
    sim.run()
    assert pulses == {"job": [1] * JOBS, "connection": [1] * (JOBS * WORKERS)}


def test_a_strict_priority_stage_takes_no_scheduling_or_quanta():
    """Built without deficit round robin, the stage has no ``scheduling`` or quanta: their registers are
    written to nowhere, and the rest of its configuration still comes out."""
    stage = EgressQueues(64, queues=2, depth_beats=512, max_frame=1024, weighted=False)
    stage._MustUse__silence = True
    dut = SwitchRegisters(jobs=1, workers=1, forwarding_entries=1, mtu=MTU, increment_bits=2, egress=stage, ports=1)
    assert set(dut.egress[0].shape().members) == {"dscp_class", "class_table"}

    async def bench(ctx):
        await write_registers(ctx, dut.csr, register_writes("egress", 0, scheduling=1, quantum0=9, quantum1=9,
                                                             dscp9_class=3))
        await ctx.tick()
        assert ctx.get(dut.egress[0].dscp_class[9]) == 3

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_a_boards_mac_counters_read_at_their_ports_addresses():
    """Built with ``ethernet``, each port's MAC counters read at that port's ``ethernet`` addresses, each its own
    (no two swapped); built without, those addresses read 0 and the map has no such block."""
    rng = random.Random(5)
    stage = egress_template()
    dut = SwitchRegisters(jobs=1, workers=1, forwarding_entries=1, mtu=MTU, increment_bits=2, egress=stage,
                          ports=PORTS, ethernet=True)
    bare = SwitchRegisters(jobs=1, workers=1, forwarding_entries=1, mtu=MTU, increment_bits=2, egress=stage,
                           ports=PORTS)
    assert instances(block("ethernet"), bare.parameters) == 0 and not hasattr(bare, "ethernet_status")
    values = {(p, name): rng.getrandbits(32) for p in range(PORTS) for name in ETHERNET_COUNTERS}

    async def bench(ctx):
        for (p, name), value in values.items():
            ctx.set(dut.ethernet_status[p][name], value)
        for (p, name), value in values.items():
            assert await read_register(ctx, dut.csr, address("ethernet", p, name)) == value, (p, name)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_only_read_only_words_read_back_and_every_other_address_reads_0():
    """A read gives the read-only register at its address and 0 at every other address: a writable word,
    an unmapped word beside a read-only one, and a random sample of the rest of the address space (the read
    decides only on the address bits that tell read-only words apart, so the others must still be checked)."""
    rng = random.Random(11)
    stage = egress_template()
    dut = SwitchRegisters(jobs=JOBS, workers=WORKERS, forwarding_entries=ENTRIES, mtu=MTU, increment_bits=3,
                          egress=stage, ports=PORTS, ethernet=True)
    owner = check_map(dut.parameters)
    expected = {}           # address -> the value the read must give
    inputs = []             # (signal, value) to set
    class_counters = {}     # (p, name, c): value, shown by the stand-in stages

    def read_only(at, signal, value):
        expected[at] = value
        if signal is not None:
            inputs.append((signal, value))

    for p in range(PORTS):
        for name in ETHERNET_COUNTERS:
            read_only(address("ethernet", p, name), dut.ethernet_status[p][name], rng.randrange(1, 1 << 32))
        for name in EGRESS_NAMES:
            for c in range(CLASSES):
                read_only(address("egress", p, f"{name}{c}"), None, rng.randrange(1, 1 << 32))
                class_counters[p, name, c] = expected[address("egress", p, f"{name}{c}")]
        for q in range(QUEUES):
            read_only(address("egress", p, f"high_water{q}"), dut.egress_status[p].high_water[q],
                      rng.randrange(1, 1 << 32))
        for name in ("drops_oversize", "occupancy"):
            read_only(address("egress", p, name), dut.egress_status[p][name], rng.randrange(1, 1 << 9))
    for i, name in enumerate(COUNTERS):
        read_only(counter_address(name), None, i + 1)      # counter i counts i + 1 increments of one
    readable = set(expected)
    for at in owner:
        expected.setdefault(at, 0)          # a writable word, and the egress block's absent high-water marks
    for at in readable:
        for beside in (at - 1, at + 1):
            expected.setdefault(beside % (1 << 16), 0)
    for at in rng.sample(range(1 << 16), 300):
        expected.setdefault(at, 0)
    assert len(readable) > 150 and len(expected) > 2 * len(readable)

    async def bench(ctx):
        for signal, value in inputs:
            ctx.set(signal, value)
        for step in range(len(COUNTERS)):
            for i, name in enumerate(COUNTERS):
                ctx.set(dut.increments[name], int(step <= i))
            await ctx.tick()
        for name in COUNTERS:
            ctx.set(dut.increments[name], 0)
        await ctx.tick().repeat(2)
        for at, value in sorted(expected.items()):
            assert await read_register(ctx, dut.csr, at) == value, hex(at)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(class_counter_stages(dut, class_counters))
    sim.run()


def test_a_build_without_the_bounded_loss_class_enables_no_job_of_it():
    """Without ``bounded_loss`` a job written bounded-loss stays invalid (and no job is ``lossy``), a reliable
    one beside it is enabled; with the class both are, the first ``lossy``. The golden model, from the same
    register writes and the build's parameters (``config_from_registers``), enables the same jobs."""
    from netreduce.hw.switch import NetReduceSwitch
    from netreduce.registers import RegisterFile
    from netreduce.sim.switch_model import config_from_registers

    lossy = JobConfig(3, 2, message_slots=4, traffic_class="lossy", deadline_clocks=500)
    connections = [ConnectionConfig(job, w, f"02:00:00:00:{job:02x}:{2 * w:02x}", f"10.{job}.0.{2 * w + 1}",
                                    0x100 + 8 * job + w, f"02:00:00:00:{job:02x}:{2 * w + 1:02x}",
                                    f"10.{job}.0.{2 * w + 2}", 0x200 + 8 * job + w, 77 * w + job,
                                    responder_rkey=0x1234 + w if job == 3 else None)
                   for job in (3, 4) for w in range(2)]
    cfg = SwitchConfig(ports=2, jobs=[lossy, JobConfig(4, 2, message_slots=4)], connections=connections)
    writes = switch_config_writes(cfg, WORKERS)
    for bounded_loss, valid, is_lossy in ((True, (1, 1), (1, 0)), (False, (0, 1), (0, 0))):
        assert jobs_after(writes, bounded_loss) == (valid, is_lossy)
        switch = NetReduceSwitch(width=64, workers=WORKERS, jobs=JOBS, ports=PORTS, forwarding_entries=ENTRIES,
                                 mtu=MTU, message_slots=4, max_frame=2048, egress_buffer=4096,
                                 bounded_loss=bounded_loss)
        switch._MustUse__silence = True         # only its parameters are used
        build = switch.parameters
        registers = RegisterFile(build)
        for at, word in writes:
            registers.write(at, word)
        model = config_from_registers(registers, build)
        assert [job.job for job in model.jobs] == [job for job, on in zip((3, 4), valid, strict=True) if on]
        assert [job.lossy for job in model.jobs] == [bool(flag) for flag, on in zip(is_lossy, valid, strict=True)
                                                     if on]


def jobs_after(writes, bounded_loss):
    """Each job's ``valid`` and ``lossy`` in ``SwitchRegisters(bounded_loss=...)`` after ``writes``."""
    dut = SwitchRegisters(jobs=JOBS, workers=WORKERS, forwarding_entries=ENTRIES, mtu=MTU, increment_bits=3,
                          egress=egress_template(), ports=PORTS, bounded_loss=bounded_loss)
    seen = []

    async def bench(ctx):
        await write_registers(ctx, dut.csr, writes)
        await ctx.tick()
        seen.append(tuple(tuple(ctx.get(dut.jobs[j][name]) for j in range(JOBS)) for name in ("valid", "lossy")))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen[0]
