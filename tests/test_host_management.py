"""The in-band control plane on the golden model and in the host library (docs/ARCHITECTURE.md, "In-band
control plane"): the wire format, the client, and the managed switch model, which answers only its manager,
counts what it refuses, and aggregates exactly as the same switch configured directly."""

import dataclasses

import numpy as np
import pytest

from netreduce.host.management import (
    ManagementError,
    ManagementMessage,
    Manager,
    build_management_frame,
    management_address,
    parse_management_payload,
    parse_management_reply,
)
from netreduce.host.network import ModelEngine, build_allreduce
from netreduce.host.protocol import build_udp_frame, ip_to_int, mac_to_int
from netreduce.registers import (
    COUNTERS,
    RegisterFile,
    address,
    counter_address,
    register_writes,
    switch_config_writes,
)
from netreduce.sim.roce_model import parse_frame
from netreduce.sim.switch_model import SwitchModel, config_from_registers
from netreduce.wire import MANAGEMENT_PORT, ManagementOp

ADDRESS = management_address(switch_mac="02:4e:52:00:00:fe", switch_ip="10.0.255.254",
                             manager_mac="02:00:00:00:99:01", manager_ip="10.0.99.1", manager_port=5000)
# NetReduceSwitch(workers=4, jobs=2, ports=2).parameters, written out: the model does not need the RTL
BUILD = {"width": 64, "workers": 4, "jobs": 2, "dtype": "fp32", "ftz": False, "mtu": 1024, "message_packets": 4,
         "message_slots": 4, "max_frame": 9216, "adder_stages": 7, "ports": 2, "forwarding_entries": 16,
         "egress_queues": 4, "egress_buffer": 16384, "egress_weighted": False}
MANAGER_PORT = 1


def managed_model(address=ADDRESS):
    return SwitchModel.managed(BUILD, address)


def manager_of(model, port=MANAGER_PORT, address=ADDRESS):
    return Manager(address, lambda frame: [out for _, out in model.receive(port, frame)])


def request(op=ManagementOp.READ, register=0, value=0, sequence=7, reply=False, address=ADDRESS):
    return build_management_frame(ManagementMessage(op, sequence, register, value, reply=reply), address)


def normalized(config):
    """A configuration with every address as an int (the register file holds ints)."""
    def ints(record):
        return dataclasses.replace(record, **{f.name: (mac_to_int(v) if f.name.endswith("mac") else ip_to_int(v))
                                              for f in dataclasses.fields(record)
                                              if f.name.endswith(("mac", "ip")) and (v := getattr(record, f.name))
                                              is not None})
    return dataclasses.replace(ints(config), connections=[ints(c) for c in config.connections],
                               forwarding={mac_to_int(k): v for k, v in config.forwarding.items()})


# --- the wire format and the client ---------------------------------------------------------------------------

def test_request_and_reply_round_trip():
    frame = request(ManagementOp.WRITE, 0x1234, 0xDEADBEEF, sequence=0xBEEF)
    parsed = parse_frame(frame)
    assert len(frame) == 60 and parsed.header["udp_dport"] == MANAGEMENT_PORT
    assert parsed.header["udp_sport"] == 5000 and parsed.verdict["ipv4_csum_ok"]
    assert parse_management_payload(frame[42:]) == ManagementMessage(ManagementOp.WRITE, 0xBEEF, 0x1234, 0xDEADBEEF)
    assert parse_management_reply(frame, ADDRESS) is None           # a request is no reply
    reply = request(ManagementOp.READ, 0x200, 42, reply=True)
    assert parse_management_reply(reply, ADDRESS) == ManagementMessage(ManagementOp.READ, 7, 0x200, 42, reply=True)
    other = dataclasses.replace(ADDRESS, manager_port=5001)
    assert parse_management_reply(reply, other) is None


@pytest.mark.parametrize("offset, value", [(0, 0x00), (2, 2), (3, 0x03), (3, 0x00)])
def test_payloads_that_are_not_requests(offset, value):
    payload = bytearray(request()[42:54])
    payload[offset] = value
    assert parse_management_payload(bytes(payload)) is None
    assert parse_management_payload(request()[42:53]) is None       # one byte short


def test_manager_retries_then_reports():
    sent = []

    def deaf(frame):
        sent.append(frame)
        return []
    manager = Manager(ADDRESS, deaf, retries=2)
    with pytest.raises(ManagementError, match="no reply to READ 0x0200 after 3 requests"):
        manager.read(0x200)
    assert len(sent) == 3 and len(set(sent)) == 1        # the same request, its sequence kept

    answers = iter([[], [request(ManagementOp.READ, 0x200, 5, sequence=2, reply=True)]])
    late = Manager(ADDRESS, lambda frame: next(answers))
    late.sequence = 1
    assert late.read(0x200) == 5 and late.sent == 2


# --- the managed switch model ---------------------------------------------------------------------------------

def test_writes_and_reads():
    model = managed_model()
    manager = manager_of(model)
    mac = address("switch", 0, "mac")
    manager.write(mac, 0x00000001)
    manager.write(mac + 1, 0xFFFF0203)            # the high word of a 48-bit register: cut to 16 bits
    assert model.registers["switch", 0, "mac"] == 0x0203_00000001
    assert manager.read(mac) == 0                       # configuration reads 0, as through csr
    assert manager.read(counter_address("management_requests")) == 4       # this read counted before it
    assert manager.read(counter_address("frames_in")) == 5
    assert manager.read(0xFFFF) == 0                    # no register there
    manager.write(counter_address("frames_in"), 99)     # read only: nothing happens
    assert model.counters["frames_in"] == 7 and manager.read(counter_address("frames_in")) == 8
    job_mtu = address("job", 1, "mtu")
    manager.write(job_mtu, 100_000)                     # more than the build's: the build's (as the RTL)
    assert model.registers["job", 1, "mtu"] == BUILD["mtu"]
    assert model.counters["management_requests"] == 9 and model.counters["frames_out"] == 9


def loaded(workers, **kwargs):
    """The configuration of an all-reduce of ``workers`` workers in 2 jobs on 2 ports, and a register file
    written with it."""
    network, _, _ = build_allreduce(workers=workers, jobs=2, ports=2, **kwargs)
    config = network.engine.model.config
    registers = RegisterFile(BUILD, reset={("job", j, "mtu"): BUILD["mtu"] for j in range(BUILD["jobs"])})
    for word_address, word in switch_config_writes(config, BUILD["workers"]):
        registers.write(word_address, word)
    return config, registers


@pytest.mark.parametrize("traffic_class", ["reliable", "lossy"])
def test_register_file_inverts_the_configuration_writes(traffic_class):
    """Bounded-loss jobs too: their class, deadline and the receivers' R_Keys are registers."""
    config, registers = loaded(3, traffic_class=traffic_class)
    assert config_from_registers(registers, BUILD) == normalized(config)
    assert {job.traffic_class.value for job in config_from_registers(registers, BUILD).jobs} == {traffic_class}


def test_configurations_no_switch_config_holds_are_left_out():
    config, registers = loaded(2)
    registers.write(address("connection", 1, "requester_port"), 2)       # job 0 worker 1: a port not built
    registers.write(address("job", 1, "workers"), 0)                     # job 1: no workers
    registers.write(address("forwarding", 0, "port"), 3)
    registers.write(address("switch", 0, "default_port"), 2)
    left = config_from_registers(registers, BUILD)
    assert left.jobs == [] and left.connections == [] and left.default_port == 0
    assert len(left.forwarding) == len(config.forwarding) - 1


def test_in_band_configuration_aggregates_as_the_direct_one():
    """A switch model that leaves reset and is configured by its manager through management packets runs the
    same all-reduce to the same sums and counters as the model given the configuration."""
    loaded = {}

    def managed_engine(config):
        model = managed_model()
        manager = manager_of(model)
        manager.load(switch_config_writes(config, BUILD["workers"]))
        assert model.config == normalized(config)
        loaded["requests"] = manager.sent
        engine = ModelEngine(config)
        engine.model = model
        return engine

    results = []
    for engine in (None, managed_engine):
        network, jobs, inputs = build_allreduce(workers=3, jobs=2, ports=2, nbytes=8192, seed=3, engine=engine)
        network.run()
        assert all(worker.done for worker in network.workers)
        results.append(([np.asarray(worker.result).tobytes() for worker in network.workers],
                        dict(network.engine.counters)))
    (direct_sums, direct), (managed_sums, managed) = results
    assert managed_sums == direct_sums
    requests = loaded["requests"]
    assert managed["management_requests"] == requests
    assert managed["frames_in"] == direct["frames_in"] + requests
    assert managed["frames_out"] == direct["frames_out"] + requests
    assert {k: v for k, v in managed.items() if not k.startswith(("management", "frames"))} == \
           {k: v for k, v in direct.items() if not k.startswith(("management", "frames"))}


def frame_from(*, src_mac=ADDRESS.manager_mac, src_ip=ADDRESS.manager_ip, sport=ADDRESS.manager_port,
               dst_mac=ADDRESS.switch_mac, dst_ip=ADDRESS.switch_ip, dport=MANAGEMENT_PORT, payload=None):
    payload = request(ManagementOp.WRITE, address("switch", 0, "ip"), 0x0A000001)[42:54] if payload is None \
        else payload
    return build_udp_frame(payload, src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip, sport=sport,
                           dport=dport)


def tagged(frame, vid=5):
    return frame[:12] + bytes([0x81, 0x00, 0, vid]) + frame[12:]


@pytest.mark.parametrize("name, frame, port", [
    ("another MAC", frame_from(src_mac=0x020000000666), MANAGER_PORT),
    ("another IPv4 address", frame_from(src_ip=ip_to_int("10.0.99.2")), MANAGER_PORT),
    ("another UDP port", frame_from(sport=5001), MANAGER_PORT),
    ("tagged", tagged(frame_from()), MANAGER_PORT),
])
def test_only_the_manager_is_answered(name, frame, port):
    model = managed_model(dataclasses.replace(ADDRESS, manager_ingress=MANAGER_PORT))
    assert model.receive(port, frame) == []
    assert model.counters["management_refused"] == 1 and model.registers["switch", 0, "ip"] == 0
    assert model.receive(0, frame_from()) == []                         # the manager's frame, on another port
    assert model.counters["management_refused"] == 2
    assert len(model.receive(MANAGER_PORT, frame_from())) == 1 and model.registers["switch", 0, "ip"] == 0x0A000001


@pytest.mark.parametrize("payload", [
    request()[42:53],                                                       # short
    b"NX" + request()[44:54],                                               # magic
    request(reply=True)[42:54],                                             # a reply
    bytes([0x4E, 0x4D, 1, 9]) + request()[46:54],                           # op
])
def test_bad_requests_are_counted_and_not_answered(payload):
    model = managed_model()
    assert model.receive(MANAGER_PORT, frame_from(payload=payload)) == []
    assert model.counters["management_bad"] == 1 and model.counters["management_requests"] == 0


def test_replies_forged_in_the_switch_name_are_dropped():
    """A frame from the management MAC or IPv4 address is someone forging the switch's replies (rule 2): dropped,
    never forwarded to the manager."""
    model = managed_model()
    reply = request(ManagementOp.READ, counter_address("frames_in"), 0, reply=True)
    other_mac = reply[:6] + (0x020000000666).to_bytes(6, "big") + reply[12:]
    assert model.receive(0, reply) == [] and model.receive(0, other_mac) == []
    assert model.counters["drop_spoofed"] == 2 and model.counters["forwarded"] == 0


def test_other_udp_to_the_management_port_is_forwarded():
    """Management packets to another address (another switch's) are not this switch's: forwarded."""
    model = managed_model()
    frame = frame_from(dst_ip=ip_to_int("10.0.255.253"))
    assert model.receive(MANAGER_PORT, frame) == [(0, frame)]
    assert model.counters["forwarded"] == 1 and model.counters["management_refused"] == 0


def test_a_model_without_management_forwards_management_packets():
    network, _, _ = build_allreduce(workers=2)
    model = network.engine.model
    assert model.receive(0, frame_from()) == [(0, frame_from())]
    assert all(model.counters[name] == 0 for name in COUNTERS if name.startswith("management"))


def test_forwarding_writes_keep_the_jobs_state():
    """A forwarding entry written (its enable too) while a job runs changes the table at once and restarts
    nothing; a job's enable written restarts it."""
    config, _ = loaded(2)
    model = managed_model()
    manager = manager_of(model)
    manager.load(switch_config_writes(config, BUILD["workers"]))
    job = model.jobs[0]
    job.oldest = 5                                          # as if five messages had been released
    manager.load(register_writes("forwarding", 15, mac=0x020000000777, port=1, enable=1))
    assert model.jobs[0] is job and model.config.port_of(0x020000000777) == 1
    manager.load(register_writes("job", 0, enable=1))
    assert model.jobs[0] is not job and model.jobs[0].oldest == config.jobs[0].start_msg
