"""`netreduce simulate`: the JSON summary contract, --dump and --input, and one-line user errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from netreduce.sim.fp import tree_sum

SUMMARY_KEYS = {"engine", "status", "match", "host_to_switch", "switch_to_host", "retransmissions", "drops",
                "clocks", "throughput_beats_per_clock_per_port", "counters"}


def netreduce(*args):
    return subprocess.run([sys.executable, "-m", "netreduce", *args], capture_output=True, text=True,
                          timeout=600)


def test_listed_in_help():
    assert "simulate" in netreduce("--help").stdout
    assert "--workers" in netreduce("simulate", "--help").stdout


def test_summary_with_faults_and_dump(tmp_path):
    dump = tmp_path / "out.npz"
    result = netreduce("simulate", "--workers", "3", "--bytes", "20000", "--mtu", "256", "--loss", "0.02",
                       "--dup", "0.02", "--reorder", "0.02", "--jobs", "2", "--seed", "4", "--dump", str(dump))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["match"] is True and summary["status"] == "done"
    assert summary["host_to_switch"]["packets"] > 0 and summary["host_to_switch"]["bytes"] > 0
    assert summary["retransmissions"] > 0
    assert {"up_loss", "down_loss"} <= summary["drops"].keys()
    assert 0 < summary["throughput_beats_per_clock_per_port"] <= 1.0
    arrays = np.load(dump)
    assert len(arrays.files) == 2 * 3 * 2
    for job in range(2):
        inputs = np.stack([arrays[f"job{job}_worker{w}_input"] for w in range(3)])
        assert inputs.dtype == np.float32 and inputs.shape == (3, 5000)
        expected = tree_sum("fp32", inputs.view(np.uint32)).astype(np.uint32)
        for w in range(3):
            np.testing.assert_array_equal(arrays[f"job{job}_worker{w}_result"].view(np.uint32), expected)


def test_input_file_round_trip(tmp_path):
    source = tmp_path / "in.npz"
    values = {"a": np.array([1.0, 2.5, -3.0], np.float32), "b": np.array([0.5, 0.25, 3.0], np.float32)}
    np.savez(source, **values)
    dump = tmp_path / "out.npz"
    result = netreduce("simulate", "--workers", "2", "--input", str(source), "--dtype", "fp16",
                       "--dump", str(dump))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["match"] is True
    got = np.load(dump)["job0_worker1_result"]
    assert got.dtype == np.float16 and got.tolist() == [1.5, 2.75, 0.0]


@pytest.mark.parametrize("args,message", [
    (["--workers", "2"], "--bytes"),
    (["--workers", "2", "--bytes", "6"], "whole number"),
    (["--workers", "0", "--bytes", "8"], "at least 1"),
    (["--workers", "2", "--bytes", "8", "--loss", "2"], "probability"),
    (["--workers", "2", "--input", "missing.npz"], "no such file"),
    (["--workers", "2", "--bytes", "8", "--engine", "rtl", "--ports", "5"], "ports must be"),
    (["--workers", "2", "--bytes", "8", "--engine", "rtl", "--message-slots", "3"], "power of two"),
])
def test_user_errors_are_one_line(args, message):
    result = netreduce("simulate", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
