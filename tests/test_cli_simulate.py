"""`netreduce simulate`: the JSON summary contract, --dump and --input, --pcap (read back, and dissected
by tshark where it is installed), and one-line user errors."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from netreduce.host.icrc import icrc_span
from netreduce.host.pcap import read_pcapng
from netreduce.host.protocol import AggHeader
from netreduce.sim.fp import tree_sum
from netreduce.sim.roce_model import parse_frame

from references import check_link_capture

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


def test_start_psn_and_start_msg_across_their_wraps(tmp_path):
    """``--start-psn`` and ``--start-msg`` near 2^24 and 2^32: PSNs and message numbers wrap inside the run
    (the capture shows both), and the sums are exact."""
    pcap = tmp_path / "out.pcapng"
    result = netreduce("simulate", "--workers", "2", "--bytes", "8000", "--mtu", "256", "--start-psn",
                       str((1 << 24) - 4), "--start-msg", str((1 << 32) - 2), "--pcap", str(pcap))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["match"] is True
    psns, seqs = set(), set()
    for record in read_pcapng(pcap):
        parsed = parse_frame(record.frame)
        if parsed.header["roce"] and parsed.header["bth_opcode"] in (0x06, 0x0A):      # FIRST, ONLY
            psns.add(parsed.header["bth_psn"])
            seqs.add(AggHeader.unpack(parsed.payload).msg_seq)
    assert (1 << 24) - 4 in psns and min(psns) < 100
    assert seqs == {((1 << 32) - 2 + i) % (1 << 32) for i in range(8)}      # 8 messages of 1008 bytes


@pytest.fixture(scope="module")
def faulty_capture(tmp_path_factory):
    """``(pcap path, summary)`` of an all-reduce with every kind of fault on both sides of the switch."""
    pcap = tmp_path_factory.mktemp("pcap") / "out.pcapng"
    result = netreduce("simulate", "--workers", "3", "--bytes", "6000", "--loss", "0.05", "--dup", "0.05",
                       "--reorder", "0.05", "--corrupt", "0.05", "--pcap", str(pcap))
    assert result.returncode == 0, result.stderr
    return pcap, json.loads(result.stdout)


def test_pcap_of_every_link(faulty_capture):
    """Every frame a host or the switch sent is in the capture, as sent, with a valid ICRC; what arrived
    is what was sent, but for the frames the fault injector corrupted, and those are the frames that
    arrived with a bad ICRC (``check_link_capture``)."""
    pcap, summary = faulty_capture
    assert summary["match"] is True and summary["status"] == "done"
    drops = summary["drops"]
    assert all(drops[f"{side}_{kind}"] > 0 for side in ("up", "down") for kind in ("loss", "duplicate", "corrupt"))
    counts = check_link_capture(pcap, summary)
    assert counts["corrupted_up"] + counts["corrupted_down"] > 0
    interfaces = {r.interface for r in read_pcapng(pcap)}
    assert interfaces == {f"{end} ({link})" for h in range(3) for end, link in
                          ((f"host{h}", "link to switch port 0"), ("switch port 0", f"link to host{h}"))}


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install tshark)")
def test_pcap_dissected_by_tshark(faulty_capture):
    """Wireshark reads the capture as we wrote it and dissects every RoCE frame as InfiniBand (BTH opcode,
    destination QP, PSN) with its ICRC where ours is. Wireshark 4.0 shows the ICRC
    (``infiniband.invariant.crc``) but does not check it; ``test_pcap_of_every_link`` checks it."""
    pcap, _ = faulty_capture
    fields = ("frame.interface_name", "frame.packet_flags_direction", "frame.len", "udp.dstport",
              "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.invariant.crc",
              "_ws.malformed")
    result = subprocess.run(["tshark", "-r", str(pcap), "-d", "udp.port==4791,infiniband", "-T", "fields",
                             "-E", "occurrence=f", *(arg for field in fields for arg in ("-e", field))],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [dict(zip(fields, line.split("\t"), strict=True)) for line in result.stdout.splitlines()]
    records = read_pcapng(pcap)
    assert len(rows) == len(records)
    roce = 0
    for row, record in zip(rows, records, strict=True):
        assert row["frame.interface_name"] == record.interface
        assert int(row["frame.packet_flags_direction"], 16) == record.direction
        assert int(row["frame.len"]) == len(record.frame) and not row["_ws.malformed"]
        header = parse_frame(record.frame).header
        if header["roce"]:
            roce += 1
            assert int(row["infiniband.bth.opcode"]) == header["bth_opcode"]
            assert int(row["infiniband.bth.destqp"], 16) == header["bth_dest_qp"]
            assert int(row["infiniband.bth.psn"]) == header["bth_psn"]
            end = icrc_span(record.frame)[2]
            assert int(row["infiniband.invariant.crc"], 16) == int.from_bytes(record.frame[end - 4:end], "big")
        else:
            assert row["udp.dstport"] != "4791" and not row["infiniband.bth.opcode"]
    assert roce > 0.8 * len(records)


@pytest.mark.parametrize("args,message", [
    (["--workers", "2"], "--bytes"),
    (["--workers", "2", "--bytes", "6"], "whole number"),
    (["--workers", "0", "--bytes", "8"], "at least 1"),
    (["--workers", "2", "--bytes", "8", "--loss", "2"], "probability"),
    (["--workers", "2", "--input", "missing.npz"], "no such file"),
    (["--workers", "2", "--bytes", "8", "--engine", "rtl", "--ports", "5"], "ports must be"),
    (["--workers", "2", "--bytes", "8", "--engine", "rtl", "--message-slots", "3"], "power of two"),
    (["--workers", "2", "--bytes", "8", "--message-slots", "6"], "power of two"),
    (["--workers", "2", "--bytes", "8", "--start-psn", str(1 << 24)], "24-bit PSN"),
    (["--workers", "2", "--bytes", "8", "--start-msg", "-1"], "32-bit message number"),
    (["--workers", "2", "--bytes", "8", "--waves", "out.vcd"], "--engine rtl"),
    (["--workers", "2", "--bytes", "8", "--pcap", "no/such/folder/out.pcapng"], "cannot write"),
    (["--workers", "2", "--bytes", "8", "--deadline-us", "5"], "--class lossy"),
    (["--workers", "2", "--bytes", "8", "--loss-bound", "0.1"], "--class lossy"),
    (["--workers", "2", "--bytes", "8", "--no-rescale"], "--class lossy"),
    (["--workers", "33", "--bytes", "8", "--class", "lossy"], "at most 32 workers"),
    (["--workers", "2", "--bytes", "8", "--class", "lossy", "--message-slots", "1"], "at least 2"),
    (["--workers", "2", "--bytes", "8", "--class", "lossy", "--loss-bound", "2"], "fraction"),
    (["--workers", "2", "--bytes", "8", "--class", "lossy", "--deadline-us", "0"], "positive"),
    (["--workers", "2", "--bytes", "8", "--class", "best-effort"], "invalid choice"),
])
def test_user_errors_are_one_line(args, message):
    result = netreduce("simulate", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


# --- the bounded-loss class (docs/ARCHITECTURE.md, "Bounded-loss class (MLT)") ---------------------------------

LOSSY_KEYS = {"deadline_completions", "late", "zero_filled_elements", "recovered", "contributors_histogram",
              "loss_fraction"}


def lossy_run(tmp_path, *args):
    dump = tmp_path / "out.npz"
    result = netreduce("simulate", "--class", "lossy", *args, "--dump", str(dump))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0]), np.load(dump)


def check_partial_sums(arrays, jobs, workers, elements, dtype="fp32"):
    """Every element of every result is the tree sum of exactly the workers its bitmap names, +0 where it
    names none; returns the bitmaps."""
    bits = {"fp32": np.uint32, "fp16": np.uint16, "bf16": np.uint16}[dtype]
    everything = []
    for job in range(jobs):
        inputs = np.stack([arrays[f"job{job}_worker{w}_input"] for w in range(workers)]).view(bits)
        assert inputs.shape == (workers, elements)
        for w in range(workers):
            result = arrays[f"job{job}_worker{w}_result"].view(bits)
            contributors = arrays[f"job{job}_worker{w}_contributors"]
            assert contributors.dtype == np.uint32 and contributors.shape == (elements,)
            assert (contributors < 1 << workers).all()
            mask = (contributors[None, :] >> np.arange(workers, dtype=np.uint32)[:, None]) & 1
            expected = tree_sum(dtype, inputs, mask=mask.astype(bool)).astype(bits)
            np.testing.assert_array_equal(result, expected)
            assert (result[contributors == 0] == 0).all()
            everything.append(contributors)
    return np.concatenate(everything)


def test_lossy_summary_dump_and_match_under_loss(tmp_path):
    """Loss before the switch fires deadlines: partial results, each the exact tree sum of its
    contributors; the summary counts them."""
    summary, arrays = lossy_run(tmp_path, "--workers", "3", "--bytes", "20000", "--mtu", "256", "--loss", "0.05",
                                "--dup", "0.02", "--reorder", "0.02", "--jobs", "2", "--seed", "4")
    assert SUMMARY_KEYS | LOSSY_KEYS <= summary.keys()
    assert summary["class"] == "lossy" and summary["status"] == "done" and summary["match"] is True
    assert summary["deadline_completions"] > 0 and summary["deadline_completions"] == \
        summary["counters"]["deadline_completions"]
    assert summary["late"] == summary["counters"]["late"]
    histogram = summary["contributors_histogram"]
    assert set(histogram) == {"0", "1", "2", "3"} and sum(histogram.values()) > 0
    assert sum(histogram[k] for k in "012") == summary["deadline_completions"]
    assert summary["rescale"] is True and 0 <= summary["loss_fraction"] < 1
    assert len(arrays.files) == 3 * 3 * 2
    contributors = check_partial_sums(arrays, 2, 3, 5000)
    assert ((contributors != 0) & (contributors != 0b111)).any()             # partial sums were delivered
    assert summary["zero_filled_elements"] == int((contributors == 0).sum())
    assert summary["loss_fraction"] == round((contributors == 0).mean(), 6)


@pytest.mark.parametrize("dtype,width,ports", [("fp32", 64, 1), ("bf16", 512, 2), ("fp16", 64, 3)])
def test_lossy_without_loss_fires_no_deadline(tmp_path, dtype, width, ports):
    """Duplicated and reordered frames, none lost: every message completes whole, before its deadline."""
    summary, arrays = lossy_run(tmp_path, "--workers", "4", "--bytes", "6000", "--dtype", dtype, "--width",
                                str(width), "--ports", str(ports), "--dup", "0.05", "--reorder", "0.05")
    assert summary["match"] is True and summary["status"] == "done"
    assert summary["deadline_completions"] == 0 and summary["late"] == 0
    assert summary["zero_filled_elements"] == 0 and summary["loss_fraction"] == 0
    assert summary["contributors_histogram"]["4"] == sum(summary["contributors_histogram"].values()) > 0
    contributors = check_partial_sums(arrays, 1, 4, 3000 if dtype != "fp32" else 1500, dtype)
    assert (contributors == 0b1111).all()


def test_lossy_rescaling_and_loss_bound(tmp_path):
    """--no-rescale averages by N instead of by each result's contributors (the summary's average_error
    against the lossless mean moves); --loss-bound 1 lets every lost result be zero-filled, never asked for."""
    source = tmp_path / "in.npz"
    rng = np.random.default_rng(5)
    signal = rng.standard_normal(2000)
    np.savez(source, **{f"w{w}": (signal + 0.1 * rng.standard_normal(2000)).astype(np.float32) for w in range(4)})
    common = ["--workers", "4", "--input", str(source), "--mtu", "256", "--loss", "0.05", "--seed", "6"]
    rescaled, arrays = lossy_run(tmp_path, *common)
    zero_filled, _ = lossy_run(tmp_path, *common, "--no-rescale")
    assert rescaled["rescale"] is True and zero_filled["rescale"] is False
    assert rescaled["match"] is True and zero_filled["match"] is True
    # the same run but for the averaging: the same results; with gradients that agree, rescaling is closer
    assert rescaled["contributors_histogram"] == zero_filled["contributors_histogram"]
    assert rescaled["average_error"] < zero_filled["average_error"]
    bound, _ = lossy_run(tmp_path, *common, "--loss-bound", "1")
    assert bound["match"] is True and bound["recovered"] == 0 and bound["zero_filled_elements"] > 0
    assert rescaled["recovered"] > 0
