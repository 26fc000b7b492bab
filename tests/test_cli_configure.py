"""``netreduce configure``: a configuration file loaded through the in-band control plane into the golden
model of a build (``--model``), the counters read back, and the requests written to a capture instead
(``--pcap``); bad inputs are one-line errors."""

import json
import subprocess
import sys

import pytest

from netreduce.host.management import parse_management_payload
from netreduce.host.pcap import read_pcap
from netreduce.registers import COUNTERS, ETHERNET_COUNTERS, address, switch_config_writes
from netreduce.wire import ManagementOp

MANAGER = ["--manager-mac", "02:00:00:00:99:01", "--manager-ip", "10.0.99.1"]
BUILD = ["--workers", "4", "--jobs", "2", "--ports", "2", "--mtu", "1024"]
CONFIG = {
    "switch": {"mac": "02:4e:52:00:00:01", "ip": "10.0.255.1"},
    "forwarding": {"02:00:00:00:00:01": 0, "02:00:00:00:00:02": 1},
    "jobs": [{"job": 7, "workers": 2}],
    "connections": [
        {"job": 7, "worker": w, "requester_mac": f"02:00:00:00:00:0{w + 1}", "requester_ip": f"10.0.0.{w + 1}",
         "requester_qpn": 256 + 2 * w, "requester_port": w, "responder_mac": f"02:00:00:00:00:0{2 - w}",
         "responder_ip": f"10.0.0.{2 - w}", "responder_qpn": 257 + 2 * w, "responder_port": 1 - w,
         "start_psn": 100 * w} for w in range(2)],
}


def netreduce(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "netreduce", "configure", *args], capture_output=True, text=True,
                          cwd=cwd)


def writes_of(tmp_path):
    from netreduce.commands.configure import load_config

    class Args:
        mtu, dtype, ftz, message_packets, message_slots, ports, max_frame = 1024, "fp32", False, 4, 4, 2, 9216
        jobs, workers, forwarding_entries = 2, 4, 16
    return switch_config_writes(load_config(tmp_path / "config.json", Args), 4)


def test_loads_the_model_and_reads_its_counters(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    result = netreduce("--model", "--config", "config.json", "--counters", *MANAGER, *BUILD, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    writes = len(writes_of(tmp_path))
    assert report["requests"] == writes + len(COUNTERS) and report["sent_again"] == 0
    counters = report["counters"]
    # each counter read shows every request up to and including its own
    assert counters["frames_in"] == writes + 1
    assert counters["management_requests"] == writes + COUNTERS.index("management_requests") + 1
    assert counters["frames_out"] == writes + COUNTERS.index("frames_out")
    assert counters["management_refused"] == counters["forwarded"] == 0


def test_a_boards_switch_reads_its_ports_mac_counters_too(tmp_path):
    """``--ethernet``: each port's MAC counters are read as well, at that port's ``ethernet`` addresses (in the
    capture); the golden model has no MAC, so they read 0 there."""
    result = netreduce("--model", "--counters", "--ethernet", *MANAGER, *BUILD, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["requests"] == len(COUNTERS) + 2 * len(ETHERNET_COUNTERS)
    assert report["ethernet"] == [dict.fromkeys(ETHERNET_COUNTERS, 0)] * 2
    assert report["counters"]["frames_in"] == 1
    result = netreduce("--pcap", "reads.pcap", "--counters", "--ethernet", *MANAGER, *BUILD, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    read = [parse_management_payload(frame[42:]).address for frame in read_pcap(tmp_path / "reads.pcap")]
    assert read[len(COUNTERS):] == [address("ethernet", p, name) for p in range(2) for name in ETHERNET_COUNTERS]


def test_writes_the_requests_to_a_capture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    result = netreduce("--pcap", "requests.pcap", "--config", "config.json", *MANAGER, *BUILD, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    frames = read_pcap(tmp_path / "requests.pcap")
    expected = writes_of(tmp_path)
    assert len(frames) == len(expected) == json.loads(result.stdout)["requests"]
    for sequence, (frame, (at, word)) in enumerate(zip(frames, expected, strict=True), start=1):
        message = parse_management_payload(frame[42:])
        assert (message.op, message.sequence, message.address, message.value) == \
            (ManagementOp.WRITE, sequence, at, word)


@pytest.mark.parametrize("args", [
    ["--model", "--config", "config.json", *BUILD],                                 # no manager
    ["--model", *MANAGER, *BUILD],                                                  # nothing to do
    ["--model", "--config", "missing.json", *MANAGER, *BUILD],
    ["--model", "--config", "bad.json", *MANAGER, *BUILD],
    ["--model", "--config", "config.json", *MANAGER, "--ports", "2", "--workers", "1"],     # more workers
    ["--model", "--config", "config.json", *MANAGER, *BUILD[:4]],                  # a port the build lacks
])
def test_user_errors_are_one_line(tmp_path, args):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "bad.json").write_text(json.dumps({"jobs": [{"workers": 2}]}))
    result = netreduce(*args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
