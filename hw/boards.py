"""The switch on an ECP5 board with 1 Gb/s RGMII Ethernet ports (amaranth-boards' platforms).

``BOARDS`` names each supported board: its amaranth-boards platform class, its RGMII ports and its
oscillator. ``SwitchOnBoard(board, *, sys_mhz=None, **switch)`` is the top: the board's oscillator into
an ECP5 PLL (``EHXPLLL``) that makes the transmit clock (``tx``, 125 MHz) and the switch's clock
(``sync``, ``sys_mhz``); every port's RGMII pins (``hw.rgmii.Rgmii``, receive clock domain ``rx<p>``)
through ``hw.ethernet.EthernetPort`` into the switch (``hw.switch.NetReduceSwitch``, built with
``switch``, ``width`` 64, ``ports`` the board's) and back. Each domain is held in reset until the PLL
locks. With ``loopback`` there is no switch: each port sends back every good frame it receives (an
image to bring up a board's Ethernet with, and the design ``board_constraints`` reads the pins of).

The switch's clock must carry every port at once through its one pipeline (docs/ARCHITECTURE.md,
"Open items (aggregation)"): a 64-bit beat per clock against one byte a clock per port at 125 MHz, so
``sys_mhz`` is at least 125 / 8 MHz per port (the default: that, times 1.25, rounded up to what the PLL
makes).

A board needs nothing but its Ethernet ports: the switch is configured and read through its in-band
control plane (``management``, a ``netreduce.wire.ManagementAddress``, which a board's switch must have;
docs/ARCHITECTURE.md, "In-band control plane"), and its ``csr`` port is tied off.
"""

from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.hdl import ClockDomain, ClockSignal, Const, Elaboratable, Instance, IOPort, Module, ResetSignal, Signal
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from ..boards import BOARDS, Board
from .ethernet import EthernetPort
from .rgmii import Rgmii
from .stream import axis_to_frames, frames_to_axis
from .switch import NetReduceSwitch

__all__ = ["Board", "BOARDS", "SwitchOnBoard", "SwitchOnGmii", "SwitchOnRgmii", "ecp5_pll", "PllConfig",
           "default_sys_mhz", "board_constraints", "ethernet_port", "rgmii_port"]

TX_HZ = 125_000_000
WIDTH = 64


@dataclass(frozen=True)
class PllConfig:
    clki_div: int
    clkfb_div: int          # feedback from CLKOP
    clkop_div: int          # CLKOP: the first output
    clkos_div: int          # CLKOS: the second output
    vco_hz: float
    outputs_hz: tuple       # (CLKOP, CLKOS) as made


def ecp5_pll(input_hz, first_hz, second_hz):
    """Dividers of an ECP5 ``EHXPLLL`` that make ``first_hz`` exactly on CLKOP (fed back) and the nearest
    to ``second_hz`` on CLKOS: input divided to 3.125..400 MHz, VCO 400..800 MHz, dividers 1..128
    (Lattice TN1263). ``ValueError`` if ``first_hz`` cannot be made."""
    best = None
    for clki_div in range(1, 129):
        pfd = input_hz / clki_div
        if not 3.125e6 <= pfd <= 400e6:
            continue
        for clkfb_div in range(1, 81):
            if abs(pfd * clkfb_div - first_hz) > 1e-3:
                continue
            for clkop_div in range(1, 129):
                vco = first_hz * clkop_div
                if not 400e6 <= vco <= 800e6:
                    continue
                clkos_div = min(128, max(1, round(vco / second_hz)))
                error = abs(vco / clkos_div - second_hz)
                if best is None or error < best[0] - 1e-3:
                    best = (error, PllConfig(clki_div, clkfb_div, clkop_div, clkos_div, vco,
                                             (first_hz, vco / clkos_div)))
    if best is None:
        raise ValueError(f"an ECP5 PLL cannot make {first_hz / 1e6} MHz from {input_hz / 1e6} MHz")
    return best[1]


def default_sys_mhz(ports):
    """The switch's clock for ``ports`` 1 Gb/s ports at 64 bits: 125 / 8 MHz each, with a quarter spare."""
    return 1.25 * ports * TX_HZ / (WIDTH // 8) / 1e6


def _pll_instance(config, clock_in, first, second, locked):
    return Instance(
        "EHXPLLL",
        a_FREQUENCY_PIN_CLKI=str(round(config.outputs_hz[0] * config.clki_div / config.clkfb_div / 1e6, 6)),
        a_FREQUENCY_PIN_CLKOP=str(round(config.outputs_hz[0] / 1e6, 6)),
        a_FREQUENCY_PIN_CLKOS=str(round(config.outputs_hz[1] / 1e6, 6)),
        a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
        p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED", p_DPHASE_SOURCE="DISABLED",
        p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB", p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
        p_CLKI_DIV=config.clki_div, p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=config.clkfb_div,
        p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=config.clkop_div, p_CLKOP_CPHASE=config.clkop_div - 1,
        p_CLKOP_FPHASE=0,
        p_CLKOS_ENABLE="ENABLED", p_CLKOS_DIV=config.clkos_div, p_CLKOS_CPHASE=config.clkos_div - 1,
        p_CLKOS_FPHASE=0,
        i_CLKI=clock_in, i_CLKFB=first, i_RST=Const(0), i_STDBY=Const(0), i_PHASESEL0=Const(0),
        i_PHASESEL1=Const(0), i_PHASEDIR=Const(0), i_PHASESTEP=Const(0), i_PHASELOADREG=Const(0),
        i_PLLWAKESYNC=Const(0), i_ENCLKOP=Const(0), i_ENCLKOS=Const(0),
        o_CLKOP=first, o_CLKOS=second, o_LOCK=locked,
    )


class SwitchOnBoard(Elaboratable):
    """The top for ``board`` (a key of ``BOARDS``; module documentation)."""

    def __init__(self, board, *, sys_mhz=None, loopback=False, **switch):
        try:
            if board not in BOARDS:
                raise ValueError(f"board must be one of {', '.join(BOARDS)}, not {board!r}")
            self.board = BOARDS[board]
            ports = self.board.ports
            self.sys_mhz = sys_mhz or default_sys_mhz(ports)
            if self.sys_mhz < default_sys_mhz(ports) / 1.25:
                raise ValueError(f"sys_mhz {self.sys_mhz} cannot carry {ports} ports of 1 Gb/s at {WIDTH} bits: "
                                 f"at least {default_sys_mhz(ports) / 1.25} MHz")
            self.pll = ecp5_pll(self.board.clock_hz, TX_HZ, self.sys_mhz * 1e6)
        except ValueError:
            self._MustUse__silence = True       # a rejected design is not an unused one
            raise
        self.loopback = loopback
        if not loopback and switch.get("management") is None:
            self._MustUse__silence = True
            raise ValueError("a board's switch is configured in-band only: give it a management address "
                             "(the manager's MAC and IPv4 address)")
        self.switch = None if loopback else NetReduceSwitch(width=WIDTH, ports=ports, ethernet=True, **switch)
        self.max_frame = switch.get("max_frame", 9216) if loopback else self.switch.longest_frame

    def elaborate(self, platform):
        m = Module()
        board = self.board
        m.submodules.clock_in = clock_in = io.Buffer("i", platform.request(board.clock, 0, dir="-"))
        tx_clock, sys_clock, locked = Signal(), Signal(), Signal()
        m.submodules.pll = _pll_instance(self.pll, clock_in.i, tx_clock, sys_clock, locked)
        m.domains.tx = ClockDomain("tx")
        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("tx").eq(tx_clock), ClockSignal("sync").eq(sys_clock)]
        if not self.loopback:
            m.submodules.switch = switch = self.switch
            m.d.comb += switch.csr.we.eq(0)         # configured in-band
        for p in range(board.ports):
            m.domains += ClockDomain(f"rx{p}")
        for domain in ("tx", "sync") + tuple(f"rx{p}" for p in range(board.ports)):
            m.submodules[f"reset_{domain}"] = ResetSynchronizer(~locked, domain=domain)
        for p in range(board.ports):
            rgmii_port(m, p, platform.request("eth_rgmii", p, dir="-"), None if self.loopback else switch,
                       self.max_frame)
        return m


def ethernet_port(m, p, gmii, switch, max_frame):
    """Port ``p`` of a board top: an ``EthernetPort`` (receive domain ``rx<p>``, which the caller defines;
    transmit domain ``tx``) on ``gmii`` (anything with ``rx_dv``, ``rx_er``, ``rxd`` out and ``tx_en``,
    ``tx_er``, ``txd`` in) into port ``p`` of ``switch`` (built with ``ethernet``: the port's counters go to its
    registers) and back, or with ``switch`` None, each good frame back out (the bring-up image). Returns the
    ``EthernetPort``."""
    m.submodules[f"port{p}"] = port = EthernetPort(WIDTH, max_frame=max_frame, rx_domain=f"rx{p}", tx_domain="tx")
    m.d.comb += [port.rx_dv.eq(gmii.rx_dv), port.rx_er.eq(gmii.rx_er), port.rxd.eq(gmii.rxd),
                 gmii.tx_en.eq(port.tx_en), gmii.tx_er.eq(port.tx_er), gmii.txd.eq(port.txd)]
    if switch is None:
        wiring.connect(m, port.o, port.i)
    else:
        frames_to_axis(m, port.o, switch.s_axis[p])
        axis_to_frames(m, switch.m_axis[p], port.i)
        m.d.comb += [switch.ethernet_status[p][name].eq(getattr(port, name)) for name in EthernetPort.COUNTERS]
    return port


def rgmii_port(m, p, pins, switch, max_frame):
    """``ethernet_port`` on the RGMII ``pins`` (``Rgmii``)."""
    m.submodules[f"rgmii{p}"] = rgmii = Rgmii(pins, rx_domain=f"rx{p}", tx_domain="tx")
    return ethernet_port(m, p, rgmii, switch, max_frame)


def board_constraints(board):
    """The pin and timing constraints (LPF) of ``board``'s top: what amaranth-boards says of the pins the
    top uses and the clocks (the oscillator, each port's receive clock at 125 MHz; the PLL's outputs
    nextpnr derives). The same for the switch and for ``loopback``: they use the same pins."""
    platform = BOARDS[board].platform_class()()
    plan = platform.prepare(SwitchOnBoard(board, loopback=True), name="top")
    text = plan.files["top.lpf"]
    text = text.decode() if isinstance(text, bytes) else text
    lines = [line for line in text.splitlines() if not line.startswith("# Automatically generated")]
    return "\n".join([f"# {board}: pins and clocks of netreduce's board top, from amaranth-boards",
                      "# (written by netreduce.hw.boards.board_constraints; tests/test_boards.py checks it)",
                      *lines]) + "\n"


class SwitchOnGmii(wiring.Component):
    """What ``SwitchOnBoard`` puts between the pins and the switch, for simulation: ``ports`` ports of
    ``EthernetPort`` on GMII (``gmii[p]``: ``rxd``, ``rx_dv``, ``rx_er`` in, ``txd``, ``tx_en``,
    ``tx_er`` out) around a 64-bit ``NetReduceSwitch`` (built with ``switch``, which must name its
    ``management`` address: its ``csr`` is tied off, as on the board). No PLL and no DDR buffers: the
    clocks and resets of ``sync`` (the switch: Verilog ``clk``, ``rst``), ``tx`` (``tx_clk``, ``tx_rst``)
    and each port's ``rx<p>`` (``rx_clk[p]``, ``rx_rst[p]``) are inputs."""

    def __init__(self, ports, **switch):
        if switch.get("management") is None:
            raise ValueError("the switch on a board is configured in-band only: give it a management address")
        self.switch = NetReduceSwitch(width=WIDTH, ports=ports, ethernet=True, **switch)
        self.ports = ports
        gmii = wiring.Signature({"rxd": In(8), "rx_dv": In(1), "rx_er": In(1),
                                 "txd": Out(8), "tx_en": Out(1), "tx_er": Out(1)})
        super().__init__({"gmii": Out(gmii).array(ports),
                          "tx_clk": In(1), "tx_rst": In(1),
                          "rx_clk": In(1).array(ports), "rx_rst": In(1).array(ports)})

    def elaborate(self, platform):
        m = Module()
        m.domains.tx = ClockDomain("tx")
        m.d.comb += [ClockSignal("tx").eq(self.tx_clk), ResetSignal("tx").eq(self.tx_rst)]
        m.submodules.switch = switch = self.switch
        m.d.comb += switch.csr.we.eq(0)         # configured in-band
        for p in range(self.ports):
            m.domains += ClockDomain(f"rx{p}")
            m.d.comb += [ClockSignal(f"rx{p}").eq(self.rx_clk[p]), ResetSignal(f"rx{p}").eq(self.rx_rst[p])]
            ethernet_port(m, p, self.gmii[p], switch, switch.longest_frame)
        return m


# the RGMII pins of a simulated board port, as the top's Verilog ports name them: rgmii<p>_<name>
RGMII_PINS = (("rx_clk", 1), ("rx_ctl", 1), ("rx_data", 4), ("tx_clk", 1), ("tx_ctl", 1), ("tx_data", 4))


class SwitchOnRgmii(wiring.Component):
    """``SwitchOnBoard`` from its clocks to its pins, for simulation: ``ports`` RGMII ports (Verilog ports
    ``rgmii<p>_rx_clk``, ``_rx_ctl``, ``_rx_data`` in, ``rgmii<p>_tx_clk``, ``_tx_ctl``, ``_tx_data`` out),
    each through ``Rgmii`` and an ``EthernetPort`` (``rgmii_port``, as on the board) into a 64-bit
    ``NetReduceSwitch`` built with ``switch`` (its ``management`` address given: ``csr`` is tied off). The
    Versa ECP5's platform (``simulation_platform``) lowers the DDR and pin buffers to the ECP5's primitives
    (IDDRX1F, ODDRX1F, IB, OBZ and the output enable's flip-flops), whose behavioural models are
    ``tb/ecp5_primitives.v``. No PLL: the switch's clock (``clk``) and the transmit clock (``tx_clk``, 125 MHz)
    are inputs, each port's receive clock comes in on its pin, and ``reset`` holds every domain in reset
    until it is released, through a ``ResetSynchronizer`` per domain, as the PLL's lock does on the board.
    Each port's MAC counters read in-band, as on the board (the register map's ``ethernet`` block)."""

    def __init__(self, ports, **switch):
        if switch.get("management") is None:
            raise ValueError("the switch on a board is configured in-band only: give it a management address")
        self.switch = NetReduceSwitch(width=WIDTH, ports=ports, ethernet=True, **switch)
        self.ports = ports
        self.simulation_platform = BOARDS["versa-ecp5"].platform_class()()
        super().__init__({"clk": In(1), "tx_clk": In(1), "reset": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.domains.tx = ClockDomain("tx")
        m.d.comb += [ClockSignal("sync").eq(self.clk), ClockSignal("tx").eq(self.tx_clk)]
        m.submodules.switch = switch = self.switch
        m.d.comb += switch.csr.we.eq(0)         # configured in-band
        for p in range(self.ports):
            m.domains += ClockDomain(f"rx{p}")
        for domain in ("sync", "tx") + tuple(f"rx{p}" for p in range(self.ports)):
            m.submodules[f"reset_{domain}"] = ResetSynchronizer(self.reset, domain=domain)
        for p in range(self.ports):
            pins = SimpleNamespace(**{name: io.SingleEndedPort(IOPort(width, name=f"rgmii{p}_{name}"))
                                      for name, width in RGMII_PINS})
            rgmii_port(m, p, pins, switch, switch.longest_frame)
        return m
