"""The board tops (netreduce.hw.boards): the ECP5 PLL's dividers, the constraints in constraints/ (generated
from amaranth-boards, checked to be what the build uses), and each board's top elaborating for its
platform (pins, DDR buffers, PLL, clock domains)."""

from pathlib import Path

import pytest

from netreduce.hw.boards import (
    BOARDS,
    TX_HZ,
    SwitchOnBoard,
    SwitchOnGmii,
    board_constraints,
    default_sys_mhz,
    ecp5_pll,
)
from netreduce.tb.scenarios import MANAGEMENT

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_pll_makes_the_transmit_clock_exactly_and_the_switch_clock_it_needs(board):
    spec = BOARDS[board]
    want = default_sys_mhz(spec.ports) * 1e6
    pll = ecp5_pll(spec.clock_hz, TX_HZ, want)
    assert 3.125e6 <= spec.clock_hz / pll.clki_div <= 400e6                      # the phase detector's range
    assert 400e6 <= pll.vco_hz <= 800e6 and pll.vco_hz == TX_HZ * pll.clkop_div  # the VCO's
    assert spec.clock_hz * pll.clkfb_div / pll.clki_div == TX_HZ                 # CLKOP fed back: exact
    assert all(1 <= d <= 128 for d in (pll.clki_div, pll.clkfb_div, pll.clkop_div, pll.clkos_div))
    assert pll.outputs_hz[1] == pll.vco_hz / pll.clkos_div
    assert abs(pll.outputs_hz[1] - want) / want < 0.05
    assert pll.outputs_hz[1] >= 125e6 / 8 * spec.ports                           # carries every port


def test_pll_that_cannot_be_made():
    with pytest.raises(ValueError, match="cannot make"):
        ecp5_pll(1e6, TX_HZ, 40e6)                  # no divider brings 1 MHz into the phase detector's range


def test_switch_clock_too_slow_for_the_ports_and_unknown_boards():
    with pytest.raises(ValueError, match="cannot carry"):
        SwitchOnBoard("versa-ecp5", sys_mhz=20, loopback=True)
    with pytest.raises(ValueError, match="board must be one of"):
        SwitchOnBoard("de0-nano", loopback=True)


def test_a_board_switch_needs_its_management_address():
    """Its csr is tied off: without the in-band control plane it could never be configured."""
    with pytest.raises(ValueError, match="configured in-band only"):
        SwitchOnBoard("versa-ecp5", workers=2, jobs=1)
    with pytest.raises(ValueError, match="configured in-band only"):
        SwitchOnGmii(2, workers=2, jobs=1)


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_constraints_are_the_generated_ones(board):
    """constraints/<board>.lpf is what the build writes: every RGMII pin and clock of the board's ports
    from amaranth-boards, each receive clock constrained to 125 MHz."""
    text = (REPO / "constraints" / f"{board}.lpf").read_text()
    assert text == board_constraints(board)
    for p in range(BOARDS[board].ports):
        assert f'FREQUENCY PORT "eth_rgmii_{p}__rx_clk__io" 125000000.0 HZ;' in text
        assert f"eth_rgmii_{p}__tx_data__io[3]" in text


@pytest.mark.slow(minutes=1)
def test_switch_top_elaborates_for_the_versa():
    """The switch on the Versa board's two ports: the platform prepares the whole design (Yosys' RTLIL and
    the LPF) without complaint."""
    spec = BOARDS["versa-ecp5"]
    top = SwitchOnBoard("versa-ecp5", workers=2, jobs=1, mtu=512, message_packets=2, message_slots=2,
                        max_frame=1024, egress_buffer=4096, management=MANAGEMENT)
    plan = spec.platform_class()().prepare(top, name="top")
    rtlil = plan.files["top.il"]
    rtlil = rtlil.decode() if isinstance(rtlil, bytes) else rtlil
    assert "EHXPLLL" in rtlil and rtlil.count("IDDRX1F") == 2 * 5 and rtlil.count("ODDRX1F") == 2 * 6
