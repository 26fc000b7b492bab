"""netreduce.synth without the tools: reading nextpnr's Fmax estimate from its log (``route=False``)."""

from netreduce.synth import _logged_fmax

PLACED_LOG = """Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 20.81 MHz (FAIL at 156.25 MHz)
Info: Max frequency for clock 'other': 300.00 MHz (PASS at 100.00 MHz)
Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 28.09 MHz (FAIL at 156.25 MHz)
"""


def test_the_last_estimate_for_clk_is_taken():
    assert _logged_fmax(PLACED_LOG) == 28.09


def test_no_estimate_is_none():
    assert _logged_fmax("Info: Program finished normally.\n") is None
