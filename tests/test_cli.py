"""The `netreduce` command: help, user errors without tracebacks, parse-pcap (RTL and model), generate."""

import json
import shutil
import subprocess
import sys

import pytest

from netreduce.host.packets import build_roce_frame
from netreduce.host.pcap import write_pcap
from netreduce.registers import ADDRESS_BITS, manifest as register_manifest

from references import capture_files

SUBCOMMANDS = ["parse-pcap", "generate", "build", "testfloat"]


def netreduce(*args, stdin=None, check=True):
    result = subprocess.run([sys.executable, "-m", "netreduce", *args], capture_output=True, text=True,
                            input=stdin, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_help_lists_subcommands():
    out = netreduce("--help").stdout
    for name in SUBCOMMANDS:
        assert name in out


def test_the_command_line_loads_no_hardware_library_to_parse_its_arguments():
    """Building the parser (every subcommand's options) loads neither Amaranth nor numpy nor scapy: each
    command loads what it needs when it runs, so that ``--help`` and a user error answer at once."""
    probe = ("import sys; from netreduce.cli import build_parser; build_parser(); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'amaranth', 'numpy', 'scapy', 'cocotb'}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help(name):
    assert "usage:" in netreduce(name, "--help").stdout


def test_each_command_shows_the_switch_defaults_it_uses():
    """``build`` has smaller switch defaults than ``generate`` (``BOARD_DEFAULTS``); each one's help says its own."""
    from netreduce.cli import build_parser
    from netreduce.commands.build import BOARD_DEFAULTS
    for command, workers, max_frame in (("generate", 8, 9216),
                                        ("build", BOARD_DEFAULTS["workers"], BOARD_DEFAULTS["max_frame"])):
        text = " ".join(netreduce(command, "--help").stdout.split())
        args = build_parser().parse_args([command, "--out", "x"] + (["--board", "versa-ecp5"] if command == "build"
                                                                      else []))
        assert (args.workers, args.max_frame) == (workers, max_frame)
        assert f"most workers of a job (default {workers})" in text
        assert f"longest frame that can go on (default {max_frame})" in text


def test_a_board_with_switch_defaults_of_its_own_gets_them_unless_the_command_line_says_otherwise():
    """The Versa's ECP5-45 takes a smaller switch than ``BOARD_DEFAULTS`` (``Board.switch_defaults``), and the
    one-port boards a forwarding table of one entry; a value on the command line wins, the same value as the
    general default included."""
    from netreduce.boards import BOARDS
    from netreduce.cli import build_parser
    from netreduce.commands.build import BOARD_DEFAULTS, board_switch_defaults

    def parsed(*argv):
        args = build_parser().parse_args(["build", "--out", "x", *argv])
        board_switch_defaults(args)
        return args, (args.workers, args.forwarding_entries, args.egress_queues, args.max_frame, args.bounded_loss)

    versa = dict(BOARDS["versa-ecp5"].switch_defaults)
    assert versa
    _, got = parsed("--board", "versa-ecp5")
    assert got == (versa["workers"], versa["forwarding_entries"], versa["egress_queues"], versa["max_frame"], False)
    assert versa["max_frame"] < BOARD_DEFAULTS["max_frame"]
    args, got = parsed("--board", "versa-ecp5", "--workers", str(BOARD_DEFAULTS["workers"]), "--egress-queues", "3",
                       "--bounded-loss")
    assert got[:3] + got[4:] == (BOARD_DEFAULTS["workers"], versa["forwarding_entries"], 3, True)
    assert all(type(value) in (int, bool, str, float, list, type(None)) or callable(value)
               for value in vars(args).values())
    general = build_parser().parse_args(["generate", "--out", "x"])     # (the options BOARD_DEFAULTS leaves)
    # one port: a forwarding table of one entry, and the general defaults otherwise (the bounded-loss class
    # and the egress queues included)
    _, got = parsed("--board", "butterstick")
    assert got == (BOARD_DEFAULTS["workers"], 1, general.egress_queues, BOARD_DEFAULTS["max_frame"],
                   general.bounded_loss)
    assert general.forwarding_entries != 1
    assert parsed("--board", "ecpix5-85", "--forwarding-entries", "4")[1][1] == 4
    assert parsed("--board", "butterstick", "--no-bounded-loss")[0].bounded_loss is False


@pytest.mark.parametrize("args", [
    ["no-such-command"],
    ["parse-pcap"],
    ["parse-pcap", "missing.pcap", "--model"],
    ["parse-pcap", "x.pcap", "--width", "128"],
    ["parse-pcap", "x.pcap", "--sim", "modelsim"],
    ["generate"],
    ["generate", "--width", "32", "--out", "x"],
    ["generate", "--width", "128", "--out", "x"],                      # a datapath width the switch is not built for
    ["generate", "--out", "x", "--message-slots", "3"],
    ["generate", "--out", "x", "--egress-buffer", "4096"],             # smaller than --max-frame
    ["generate", "--out", "x", "--egress-queues", "17"],
    ["generate", "--out", "x", "--width", "64", "--port-width", "512"],       # ports wider than the core
    ["build", "--board", "de0-nano", "--out", "x"],
    ["build", "--board", "versa-ecp5", "--out", "x", "--sys-mhz", "5", "--manager-mac", "02:00:00:00:00:09",
     "--manager-ip", "10.0.0.9"],                                          # too slow for two ports
    ["build", "--board", "versa-ecp5", "--out", "x"],                       # no manager: never configurable
    ["generate", "--out", "x", "--manager-mac", "02:00:00:00:00:09"],         # no --manager-ip
    ["generate", "--out", "x", "--manager-mac", "02:00:00:00:00:09", "--manager-ip", "10.0.0.300"],
    ["generate", "--out", "x", "--ports", "2", "--manager-mac", "02:00:00:00:00:09", "--manager-ip", "10.0.0.9",
     "--manager-ingress", "2"],
])
def test_user_errors_are_one_line(tmp_path, args):
    result = subprocess.run([sys.executable, "-m", "netreduce", *args], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_parse_pcap_rejects_a_file_that_is_not_a_capture(tmp_path):
    bogus = tmp_path / "bogus.pcap"
    bogus.write_bytes(b"this is not a capture")
    result = netreduce("parse-pcap", str(bogus), "--model", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def _keys():
    return {"frame", "roce", "vlan", "ip_version", "src_ip", "dst_ip", "dscp", "udp_dport", "opcode",
            "dest_qp", "psn", "ack_req", "pad", "pkey", "reth", "immdt", "aeth", "payload_len", "icrc_ok",
            "ipv4_csum_ok"}


def test_parse_pcap_model_on_a_built_frame(tmp_path):
    frame = build_roce_frame(0x0A, bytes(64), reth=(0x1122334455667788, 0xCAFE, 64), psn=77, dest_qp=0x123,
                             vlan=5, src_ip="10.0.0.1", dst_ip="10.0.0.2", dscp=26)
    path = tmp_path / "one.pcap"
    write_pcap(path, [frame])
    (line,) = netreduce("parse-pcap", str(path), "--model").stdout.splitlines()
    record = json.loads(line)
    assert set(record) >= _keys()
    assert record["frame"] == 0 and record["roce"] is True and record["vlan"] == 5
    assert record["src_ip"] == "10.0.0.1" and record["dst_ip"] == "10.0.0.2" and record["dscp"] == 26
    assert record["opcode"] == 0x0A and record["psn"] == 77 and record["dest_qp"] == 0x123
    assert record["reth"] == {"va": 0x1122334455667788, "rkey": 0xCAFE, "dma_len": 64}
    assert record["payload_len"] == 64 and record["icrc_ok"] is True and record["ipv4_csum_ok"] is True


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 512])
def test_parse_pcap_rtl_matches_model(width):
    """Every frame of two captures (one with bad ICRCs): the RTL's JSON equals the model's, line by line."""
    for path in [capture_files(bad=False)[-1], capture_files(bad=True)[0]]:
        rtl = netreduce("parse-pcap", str(path), "--width", str(width)).stdout.splitlines()
        model = netreduce("parse-pcap", str(path), "--model").stdout.splitlines()
        assert rtl == model
        assert len(rtl) > 0 and all(set(json.loads(line)) >= _keys() for line in rtl)


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed")
@pytest.mark.slow
def test_parse_pcap_rtl_on_icarus_matches_model():
    """The same on Icarus Verilog, at 64 bits."""
    for path in [capture_files(bad=False)[-1], capture_files(bad=True)[0]]:
        rtl = netreduce("parse-pcap", str(path), "--sim", "icarus").stdout.splitlines()
        model = netreduce("parse-pcap", str(path), "--model").stdout.splitlines()
        assert rtl == model
        assert len(rtl) > 0 and all(set(json.loads(line)) >= _keys() for line in rtl)


@pytest.mark.slow(minutes=1)        # Yosys generates the whole switch
@pytest.mark.parametrize(("width", "port_width"), [(64, None), (512, 64)])
def test_generate_writes_verilog_and_manifest(tmp_path, width, port_width):
    """(The 512-bit core with 64-bit ports: its ports have the ports' width, its parameters the core's.)"""
    out = tmp_path / "gen"
    netreduce("generate", "--width", str(width), "--out", str(out), "--workers", "2", "--jobs", "1",
              "--ports", "2", "--egress-queues", "2", *(["--port-width", str(port_width)] if port_width else []))
    port_width = port_width or width
    verilog = (out / "netreduce_top.v").read_text()
    assert "module netreduce_top" in verilog
    manifest = json.loads((out / "netreduce_top.json").read_text())
    ports = {port["name"]: port for port in manifest["ports"]}
    for p in (0, 1):
        assert ports[f"s_axis__{p}__tdata"] == {"name": f"s_axis__{p}__tdata", "direction": "input",
                                                "width": port_width}
        assert ports[f"m_axis__{p}__tkeep"]["width"] == port_width // 8
        assert ports[f"m_axis__{p}__tready"]["direction"] == "input"
    assert "s_axis__2__tdata" not in ports
    assert ports["csr__rdata"]["direction"] == "output" and ports["csr__addr"]["width"] == ADDRESS_BITS
    assert manifest["registers"] == json.loads(json.dumps(register_manifest(manifest["parameters"])))
    assert manifest["parameters"]["workers"] == 2 and manifest["parameters"]["width"] == width
    assert manifest["parameters"]["port_width"] == port_width
    assert manifest["parameters"]["egress_queues"] == 2
    assert [b["count"] for b in manifest["registers"]["blocks"] if b["name"] == "egress"] == [2]
    for name in ports:
        assert name in verilog
