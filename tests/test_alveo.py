"""The Alveo U280 top (netreduce.hw.alveo): the MMCM's dividers, the constraints in constraints/ (checked
to be what the build writes), the top's Verilog (the CMAC black boxes with their AXI-Stream ports, the
clocking, every pin of the constraints a port of the top) and the Vivado script that builds it, as
``netreduce build --board alveo-u280`` writes them."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from netreduce.hw.alveo import U280, SwitchOnAlveo, alveo_constraints, mmcm_config
from netreduce.wire import ICRC_BYTES, MAX_HEADER_BYTES

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mhz", [100, 156.25, 200, 250, 322.265625])
def test_mmcm_makes_the_switch_clock(mhz):
    config = mmcm_config(100e6, mhz * 1e6)
    assert 800e6 <= config.vco_hz <= 1600e6 and 10e6 <= 100e6 / config.divide <= 500e6
    assert (config.mult * 8).is_integer() and (config.out_divide * 8).is_integer()
    assert config.vco_hz == pytest.approx(100e6 / config.divide * config.mult)
    assert config.output_hz == pytest.approx(config.vco_hz / config.out_divide)
    assert abs(config.output_hz - mhz * 1e6) <= 0.01 * mhz * 1e6


def test_mmcm_refuses_what_it_cannot_make():
    with pytest.raises(ValueError, match="no MMCM setting"):
        mmcm_config(1e6, 250e6)             # no divider brings 1 MHz into the phase detector's range


def test_a_card_switch_needs_its_management_address():
    with pytest.raises(ValueError, match="configured in-band only"):
        SwitchOnAlveo(workers=2, jobs=1)


def test_constraints_are_the_generated_ones():
    text = (REPO / "constraints" / "alveo-u280.xdc").read_text()
    assert text == alveo_constraints()
    for p, cage in enumerate(U280.qsfp):
        for direction, pairs in (("rx", cage.rx), ("tx", cage.tx)):
            for lane, (pin_p, pin_n) in enumerate(pairs):
                assert f"set_property PACKAGE_PIN {pin_p} [get_ports {{qsfp{p}_{direction}_p[{lane}]}}]" in text
                assert f"set_property PACKAGE_PIN {pin_n} [get_ports {{qsfp{p}_{direction}_n[{lane}]}}]" in text
    pins = re.findall(r"PACKAGE_PIN (\w+)", text)
    assert len(pins) == len(set(pins)) == 2 + 1 + 2 * (2 + 2 * 2 * 4)        # no pin twice


@pytest.mark.slow(minutes=1)
def test_build_command_writes_what_vivado_needs(tmp_path):
    if shutil.which("vivado"):
        pytest.skip("Vivado is installed here: the build would run it for an hour")
    out = tmp_path / "u280"
    result = subprocess.run([sys.executable, "-m", "netreduce", "build", "--board", "alveo-u280", "--out", str(out),
                             "--manager-mac", "02:00:00:00:99:01", "--manager-ip", "10.0.99.1", "--workers", "2",
                             "--message-slots", "2"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Vivado is not installed" in result.stdout
    names = {path.name for path in out.iterdir()}
    assert {"netreduce_alveo_u280.v", "alveo-u280.xdc", "build_netreduce_alveo_u280.tcl",
            "netreduce_alveo_u280.summary.json"} <= names
    assert (out / "alveo-u280.xdc").read_text() == (REPO / "constraints" / "alveo-u280.xdc").read_text()

    # the top's ports are the constraints' ports; each CMAC black box is the script's IP, with its AXI-Stream
    # ports connected; the switch's clock comes from the MMCM
    text = (out / "netreduce_alveo_u280.v").read_text()
    top = text[text.index("module netreduce_alveo_u280("):]
    ports = set(re.findall(r"(?:input|output) (?:\[\d+:0\] )?(\w+)", top[:top.index("endmodule")]))
    constrained = set(re.findall(r"get_ports \{?(\w+)", alveo_constraints()))
    assert constrained <= ports, constrained - ports
    script = (out / "build_netreduce_alveo_u280.tcl").read_text()
    summary = json.loads((out / "netreduce_alveo_u280.summary.json").read_text())
    longest = summary["switch"]["max_frame"] + MAX_HEADER_BYTES + ICRC_BYTES
    # both 100G ports into the 1,024-bit core, two port beats a core beat (both at line rate at once)
    assert (summary["switch"]["width"], summary["switch"]["port_width"], summary["switch"]["ports"]) == (1024, 512, 2)
    for p in range(2):
        instance = text[text.index(f"cmac_usplus_{p} cmac_{p} ("):]
        instance = instance[:instance.index(");")]
        for name in ("rx_axis_tvalid", "rx_axis_tdata", "rx_axis_tkeep", "rx_axis_tlast", "rx_axis_tuser",
                     "tx_axis_tready", "tx_axis_tvalid", "tx_axis_tdata", "tx_axis_tkeep", "tx_axis_tlast",
                     "gt_txusrclk2", "init_clk", "gt_ref_clk_p", "gt0_rxp_in", "gt3_txn_out", "stat_rx_aligned"):
            assert f".{name}(" in instance, (p, name)
        assert f"{p} {U280.qsfp[p].cmac_core} {U280.qsfp[p].gt_group}" in script
    assert "MMCME4_BASE" in text and "IBUFDS" in text
    assert "read_verilog netreduce_alveo_u280.v" in script and "read_xdc alveo-u280.xdc" in script
    assert f"RX_MAX_PACKET_LEN {{{longest + 4}}}" in script
