"""RGMII (1000BASE-T: 125 MHz, data on both clock edges) to and from GMII, through the platform's DDR
buffers (``amaranth.lib.io.DDRBuffer``: IDDRX1F and ODDRX1F on the ECP5).

``Rgmii(pins, *, rx_domain, tx_domain)``: ``pins`` is an ``eth_rgmii`` resource of amaranth-boards,
requested with ``dir="-"`` (raw ports). Its subsignals are named ``rx_ctl``/``tx_ctl`` on some boards and
``rx_ctrl``/``tx_ctrl`` on others; both are taken.

- It clocks the domain ``rx_domain`` (which its parent defines) with the PHY's ``rx_clk``, and holds
  the PHY out of reset (``rst``); it leaves MDIO alone (the PHY's strapped configuration).
- Receive: ``rx_ctl`` on the rising edge is RX_DV, on the falling edge RX_DV xor RX_ER; ``rx_data``
  carries bits 3..0 of the byte on the rising edge and 7..4 on the falling edge. ``rx_dv``, ``rx_er``,
  ``rxd`` give them as GMII in ``rx_domain``, a clock (the DDR buffer's input latency) after the pins.
- Transmit: ``tx_en``, ``tx_er``, ``txd`` (GMII, in ``tx_domain``, 125 MHz) go out the same way on
  ``tx_ctl`` and ``tx_data``, and ``tx_clk`` is ``tx_domain``'s clock through a DDR output (1 on the
  rising half, 0 on the falling half), edge-aligned with the data: the PHY must add the 2 ns transmit
  delay (RGMII-ID). Likewise the receive clock is taken as the PHY sends it, so the PHY must delay it
  (its RX delay on), or the board's constraints must.

Only 1000BASE-T: at 10 and 100 Mb/s RGMII sends a nibble a clock, which this interface does not
handle.
"""

from amaranth.hdl import Cat, ClockSignal, Const, Module
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Rgmii"]


def _subsignal(pins, *names):
    for name in names:
        if hasattr(pins, name):
            return getattr(pins, name)
    raise AttributeError(f"the RGMII resource has none of {', '.join(names)}")


class Rgmii(wiring.Component):
    """GMII over RGMII pins (module documentation)."""

    rx_dv: Out(1)
    rx_er: Out(1)
    rxd: Out(8)
    tx_en: In(1)
    tx_er: In(1)
    txd: In(8)

    def __init__(self, pins, *, rx_domain, tx_domain):
        self.pins, self.rx_domain, self.tx_domain = pins, rx_domain, tx_domain
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        pins, rx, tx = self.pins, self.rx_domain, self.tx_domain
        m.submodules.rx_clk = rx_clk = io.Buffer("i", pins.rx_clk)
        m.d.comb += ClockSignal(rx).eq(rx_clk.i)
        if platform is not None and hasattr(platform, "add_clock_constraint"):
            # on the pin itself: a constraint on the buffer's output names a net that synthesis renames
            platform.add_clock_constraint(pins.rx_clk.io, 125e6)

        m.submodules.rx_ctl = rx_ctl = io.DDRBuffer("i", _subsignal(pins, "rx_ctl", "rx_ctrl"), i_domain=rx)
        m.submodules.rx_data = rx_data = io.DDRBuffer("i", pins.rx_data, i_domain=rx)
        m.d.comb += [self.rx_dv.eq(rx_ctl.i[0]), self.rx_er.eq(rx_ctl.i[0] ^ rx_ctl.i[1]),
                     self.rxd.eq(Cat(rx_data.i[0], rx_data.i[1]))]

        if hasattr(pins, "rst"):            # the PHY out of reset (the resource inverts the active-low pin)
            m.submodules.phy_rst = phy_rst = io.Buffer("o", pins.rst)
            m.d.comb += phy_rst.o.eq(0)

        m.submodules.tx_ctl = tx_ctl = io.DDRBuffer("o", _subsignal(pins, "tx_ctl", "tx_ctrl"), o_domain=tx)
        m.submodules.tx_data = tx_data = io.DDRBuffer("o", pins.tx_data, o_domain=tx)
        m.submodules.tx_clk = tx_clk = io.DDRBuffer("o", pins.tx_clk, o_domain=tx)
        m.d.comb += [tx_ctl.o[0].eq(self.tx_en), tx_ctl.o[1].eq(self.tx_en ^ self.tx_er),
                     tx_data.o[0].eq(self.txd[:4]), tx_data.o[1].eq(self.txd[4:]),
                     tx_clk.o[0].eq(Const(1)), tx_clk.o[1].eq(Const(0))]
        return m
