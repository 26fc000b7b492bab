"""The switch on an Alveo U280 with its two QSFP28 ports at 100 Gb/s, as far as open tools go.

The 100G MAC and PCS is the UltraScale+ integrated CMAC, used through Xilinx's ``cmac_usplus`` IP (3.1),
which only Vivado can generate: ``SwitchOnAlveo`` instantiates it as a black box per port
(``cmac_usplus_<p>``, with the port names of that IP's instantiation template in its AXI-Stream
configuration: 4 x 25G CAUI-4, RS-FEC, FCS inserted on transmit and checked and removed on receive) and
``vivado_script`` writes the Tcl that creates both IPs at the card's CMAC sites and transceiver quads, reads
the Verilog and the constraints and builds a bitstream where Vivado is installed (not here: no test runs
it). The pins, clocks and crossings are in ``constraints/alveo-u280.xdc`` (``alveo_constraints``, from the
card's documentation, UG1314, written from ``U280``).

Clocks: the card's 100 MHz system clock (``sysclk0``, LVDS) is each CMAC's free-running ``init_clk`` and,
through an MMCM (``mmcm_config``), the switch's clock ``sync`` (``sys_mhz``); each CMAC's user clock
(``gt_txusrclk2``, 322.265625 MHz) clocks its port's domain ``cmac<p>`` (its receive side too: the IP's
receive FIFO is on and ``rx_clk`` is that clock).

Each port, into the switch's 1,024-bit core (``NetReduceSwitch(width=1024, port_width=512, ports=2, **switch)``:
two 512-bit ports, each storing whole frames that the core takes two port beats a clock, so that at 250 MHz both
100 Gb/s lines are kept up with at once for the all-reduce and every frame of 576 bytes or more, where a core of
the ports' width would carry one line's worth and a quarter in all; docs/ARCHITECTURE.md, "A 100G card"):

receive (``cmac<p>``)
    ``rx_axis`` (no ``tready``: nothing behind it may refuse a beat) -> ``FrameFilter`` (whole frames
    without an FCS error only; a frame that finds no room is dropped whole and counted, so a switch clock
    slower than the line loses whole frames, never parts) -> an asynchronous FIFO -> the switch's ``s_axis[p]``.
transmit
    the switch's ``m_axis[p]`` -> an asynchronous FIFO into ``cmac<p>`` -> ``FrameFilter`` (store and
    forward: the CMAC must get a frame's beats without a gap once it has started, and the switch's clock is
    slower than its own) -> ``tx_axis``.

Each CMAC sends remote-fault indications until its receiver is aligned and then sends (``ctl_tx_enable``
follows ``stat_rx_aligned``). ``hbm_cattrip`` is driven low: the card's satellite controller powers the card
down if it floats high (UG1314). The switch is configured in-band (it must have a ``management`` address);
its ``csr`` is tied off.
"""

from dataclasses import dataclass

from amaranth.hdl import ClockDomain, ClockSignal, Const, DomainRenamer, Instance, Module, ResetSignal, Signal
from amaranth.lib import data, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.fifo import AsyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .ethernet import CDC_DEPTH
from .framing import FrameFilter
from .stream import FrameBeat, axis_to_frames, frame_stream, frames_to_axis
from .switch import NetReduceSwitch

__all__ = ["U280", "AlveoCard", "Qsfp", "SwitchOnAlveo", "MmcmConfig", "mmcm_config", "alveo_constraints",
           "vivado_script", "filter_beats", "CMAC_USER_HZ", "WIDTH", "CORE_WIDTH"]

WIDTH = 512                         # the CMAC's AXI-Stream, and the switch's ports
CORE_WIDTH = 2 * WIDTH              # the switch's core: k = 2 port beats a core beat, one per port
CMAC_USER_HZ = 322_265_625          # the CMAC's user clock (gt_txusrclk2) in CAUI-4 mode
LANES = 4


@dataclass(frozen=True)
class Qsfp:
    """One QSFP28 cage: its CMAC site and transceiver quad (the IP's ``CMAC_CORE_SELECT`` and
    ``GT_GROUP_SELECT``) and its package pins: the 156.25 MHz reference clock (P, N) and each lane's
    receive and transmit pair (P, N)."""
    cmac_core: str
    gt_group: str
    refclk: tuple
    rx: tuple
    tx: tuple


@dataclass(frozen=True)
class AlveoCard:
    part: str
    sysclk: tuple               # (P, N) of the 100 MHz LVDS system clock
    sysclk_hz: int
    hbm_cattrip: str
    qsfp: tuple


# UG1314 (Alveo U280 Data Center Accelerator Card User Guide), the card's master XDC
U280 = AlveoCard(
    part="xcu280-fsvh2892-2L-e",
    sysclk=("BJ43", "BJ44"), sysclk_hz=100_000_000, hbm_cattrip="D32",
    qsfp=(
        Qsfp("CMACE4_X0Y5", "X0Y40~X0Y43", refclk=("T42", "T43"),
             rx=(("L53", "L54"), ("K51", "K52"), ("J53", "J54"), ("H51", "H52")),
             tx=(("L48", "L49"), ("L44", "L45"), ("K46", "K47"), ("J48", "J49"))),
        Qsfp("CMACE4_X0Y6", "X0Y44~X0Y47", refclk=("P42", "P43"),
             rx=(("G53", "G54"), ("F51", "F52"), ("E53", "E54"), ("D51", "D52")),
             tx=(("G48", "G49"), ("E48", "E49"), ("C48", "C49"), ("A49", "A50"))),
    ),
)


@dataclass(frozen=True)
class MmcmConfig:
    mult: float                 # CLKFBOUT_MULT_F
    divide: int                 # DIVCLK_DIVIDE
    out_divide: float           # CLKOUT0_DIVIDE_F
    vco_hz: float
    output_hz: float


def mmcm_config(input_hz, output_hz):
    """An UltraScale+ MMCM (``MMCME4_BASE``) that makes ``output_hz`` from ``input_hz`` as closely as it can:
    VCO 800..1600 MHz, phase detector 10..500 MHz, multiplier and output divider in steps of 1/8."""
    best = None
    for divide in range(1, 107):
        pfd = input_hz / divide
        if not 10e6 <= pfd <= 500e6:
            continue
        for mult8 in range(16, 1025):           # CLKFBOUT_MULT_F: 2 .. 128 in eighths
            vco = pfd * mult8 / 8
            if not 800e6 <= vco <= 1600e6:
                continue
            out8 = max(8, min(1024, round(vco / output_hz * 8)))
            made = vco / (out8 / 8)
            key = (abs(made - output_hz), -vco)
            if best is None or key < best[0]:
                best = (key, MmcmConfig(mult8 / 8, divide, out8 / 8, vco, made))
    if best is None:
        raise ValueError(f"no MMCM setting makes {output_hz / 1e6} MHz from {input_hz / 1e6} MHz")
    return best[1]


def _cmac(p, qsfp_pins, init_clk, sys_reset, rx, tx, status):
    """The black box of port ``p``'s CMAC."""
    lanes = {}
    for lane in range(LANES):
        lanes[f"i_gt{lane}_rxp_in"] = qsfp_pins["rx_p"][lane]
        lanes[f"i_gt{lane}_rxn_in"] = qsfp_pins["rx_n"][lane]
        lanes[f"o_gt{lane}_txp_out"] = qsfp_pins["tx_p"][lane]
        lanes[f"o_gt{lane}_txn_out"] = qsfp_pins["tx_n"][lane]
    return Instance(
        f"cmac_usplus_{p}",
        i_gt_ref_clk_p=qsfp_pins["refclk_p"], i_gt_ref_clk_n=qsfp_pins["refclk_n"],
        i_init_clk=init_clk, i_sys_reset=sys_reset, i_drp_clk=init_clk, i_core_drp_reset=0,
        i_drp_addr=0, i_drp_di=0, i_drp_en=0, i_drp_we=0,
        i_core_rx_reset=0, i_core_tx_reset=0, i_gtwiz_reset_tx_datapath=0, i_gtwiz_reset_rx_datapath=0,
        i_gt_loopback_in=Const(0, 12),
        o_gt_txusrclk2=status["clock"], o_usr_rx_reset=status["rx_reset"], o_usr_tx_reset=status["tx_reset"],
        i_rx_clk=status["clock"],
        o_stat_rx_aligned=status["aligned"],
        i_ctl_rx_enable=1, i_ctl_rx_force_resync=0, i_ctl_rx_test_pattern=0,
        i_ctl_tx_enable=status["tx_enable"], i_ctl_tx_send_rfi=status["send_rfi"], i_ctl_tx_send_lfi=0,
        i_ctl_tx_send_idle=0, i_ctl_tx_test_pattern=0,
        i_ctl_tx_rsfec_enable=1, i_ctl_rx_rsfec_enable=1, i_ctl_rsfec_ieee_error_indication_mode=0,
        i_ctl_rx_rsfec_enable_correction=1, i_ctl_rx_rsfec_enable_indication=1,
        i_ctl_rx_systemtimerin=Const(0, 80), i_ctl_tx_systemtimerin=Const(0, 80),
        i_tx_ptp_1588op_in=Const(0, 2), i_tx_ptp_tag_field_in=Const(0, 16), i_tx_preamblein=Const(0, 56),
        o_rx_axis_tvalid=rx["valid"], o_rx_axis_tdata=rx["data"], o_rx_axis_tkeep=rx["keep"],
        o_rx_axis_tlast=rx["last"], o_rx_axis_tuser=rx["bad"],
        o_tx_axis_tready=tx["ready"], i_tx_axis_tvalid=tx["valid"], i_tx_axis_tdata=tx["data"],
        i_tx_axis_tkeep=tx["keep"], i_tx_axis_tlast=tx["last"], i_tx_axis_tuser=0,
        **lanes,
    )


class SwitchOnAlveo(wiring.Component):
    """The top for ``card`` (default ``U280``; module documentation). Ports: ``sysclk0_p``/``_n``,
    ``hbm_cattrip`` and, for each cage ``p``, ``qsfp<p>_refclk_p``/``_n``, ``qsfp<p>_rx_p``/``_n`` and
    ``qsfp<p>_tx_p``/``_n`` (4 lanes each)."""

    def __init__(self, card=U280, *, sys_mhz=250, **switch):
        try:
            if switch.get("management") is None:
                raise ValueError("the switch on a card is configured in-band only: give it a management address")
            self.card, self.sys_mhz = card, sys_mhz
            self.mmcm = mmcm_config(card.sysclk_hz, sys_mhz * 1e6)
        except ValueError:
            self._MustUse__silence = True
            raise
        self.ports = len(card.qsfp)
        self.switch = NetReduceSwitch(width=CORE_WIDTH, port_width=WIDTH, ports=self.ports, **switch)
        members = {"sysclk0_p": In(1), "sysclk0_n": In(1), "hbm_cattrip": Out(1)}
        for p in range(self.ports):
            members.update({f"qsfp{p}_refclk_p": In(1), f"qsfp{p}_refclk_n": In(1),
                            f"qsfp{p}_rx_p": In(LANES), f"qsfp{p}_rx_n": In(LANES),
                            f"qsfp{p}_tx_p": Out(LANES), f"qsfp{p}_tx_n": Out(LANES)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        W = WIDTH
        m.d.comb += self.hbm_cattrip.eq(0)

        # the 100 MHz system clock: each CMAC's init_clk, and the switch's clock through the MMCM
        clk100, clk100_buffered = Signal(), Signal()
        m.submodules.sysclk_ibuf = Instance("IBUFDS", i_I=self.sysclk0_p, i_IB=self.sysclk0_n, o_O=clk100)
        m.submodules.sysclk_bufg = Instance("BUFG", i_I=clk100, o_O=clk100_buffered)
        m.domains.init = ClockDomain("init", reset_less=True)
        m.d.comb += ClockSignal("init").eq(clk100_buffered)
        # the CMACs' sys_reset: held for the first 256 clocks after configuration
        power_on = Signal(9, init=0)
        with m.If(~power_on[8]):
            m.d.init += power_on.eq(power_on + 1)
        sys_reset = ~power_on[8]

        mmcm = self.mmcm
        feedback, sys_clock, sys_clock_buffered, locked = Signal(), Signal(), Signal(), Signal()
        m.submodules.sync_mmcm = Instance(
            "MMCME4_BASE",
            p_CLKIN1_PERIOD=1e9 / self.card.sysclk_hz, p_CLKFBOUT_MULT_F=mmcm.mult, p_DIVCLK_DIVIDE=mmcm.divide,
            p_CLKOUT0_DIVIDE_F=mmcm.out_divide,
            i_CLKIN1=clk100_buffered, i_CLKFBIN=feedback, o_CLKFBOUT=feedback, o_CLKOUT0=sys_clock,
            o_LOCKED=locked, i_RST=sys_reset, i_PWRDWN=0)
        m.submodules.sync_bufg = Instance("BUFG", i_I=sys_clock, o_O=sys_clock_buffered)
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(sys_clock_buffered)
        m.submodules.sync_reset = ResetSynchronizer(~locked, domain="sync")     # until the MMCM locks

        m.submodules.switch = switch = self.switch
        m.d.comb += switch.csr.we.eq(0)             # configured in-band
        for p in range(self.ports):
            domain = f"cmac{p}"
            m.domains += ClockDomain(domain)
            status = {name: Signal(name=f"cmac{p}_{name}") for name in
                      ("clock", "rx_reset", "tx_reset", "aligned", "tx_enable", "send_rfi")}
            m.d.comb += [ClockSignal(domain).eq(status["clock"]),
                         ResetSignal(domain).eq(status["rx_reset"] | status["tx_reset"])]
            aligned = Signal(name=f"cmac{p}_aligned_q")
            m.d[domain] += aligned.eq(status["aligned"])
            m.d.comb += [status["tx_enable"].eq(aligned), status["send_rfi"].eq(~aligned)]

            # receive: whole good frames only, into the switch's clock
            rx = {"valid": Signal(name=f"cmac{p}_rx_valid"), "data": Signal(W, name=f"cmac{p}_rx_data"),
                  "keep": Signal(W // 8, name=f"cmac{p}_rx_keep"), "last": Signal(name=f"cmac{p}_rx_last"),
                  "bad": Signal(name=f"cmac{p}_rx_bad")}
            rx_filter = DomainRenamer(domain)(FrameFilter(W, filter_beats(switch)))
            m.submodules[f"rx_filter{p}"] = rx_filter
            m.d.comb += [rx_filter.i.valid.eq(rx["valid"]), rx_filter.i.payload.data.eq(rx["data"]),
                         rx_filter.i.payload.keep.eq(rx["keep"]), rx_filter.i.payload.last.eq(rx["last"]),
                         rx_filter.i.payload.bad.eq(rx["bad"])]
            rx_cdc = AsyncFIFOBuffered(width=FrameBeat(W).size, depth=CDC_DEPTH, w_domain=domain, r_domain="sync")
            m.submodules[f"rx_cdc{p}"] = rx_cdc
            m.d.comb += [rx_cdc.w_en.eq(rx_filter.o.valid), rx_cdc.w_data.eq(rx_filter.o.payload),
                         rx_filter.o.ready.eq(rx_cdc.w_rdy)]
            into_switch = frame_stream(W).create()
            m.d.comb += [into_switch.valid.eq(rx_cdc.r_rdy), into_switch.payload.eq(rx_cdc.r_data),
                         rx_cdc.r_en.eq(into_switch.ready)]
            frames_to_axis(m, into_switch, switch.s_axis[p])

            # transmit: whole frames, without a gap, into the CMAC
            out_of_switch = frame_stream(W).create()
            axis_to_frames(m, switch.m_axis[p], out_of_switch)
            tx_cdc = AsyncFIFOBuffered(width=FrameBeat(W).size, depth=CDC_DEPTH, w_domain="sync", r_domain=domain)
            m.submodules[f"tx_cdc{p}"] = tx_cdc
            m.d.comb += [tx_cdc.w_en.eq(out_of_switch.valid), tx_cdc.w_data.eq(out_of_switch.payload),
                         out_of_switch.ready.eq(tx_cdc.w_rdy)]
            tx_store = DomainRenamer(domain)(FrameFilter(W, filter_beats(switch)))
            m.submodules[f"tx_store{p}"] = tx_store
            beat = data.View(FrameBeat(W), tx_cdc.r_data)
            m.d.comb += [tx_store.i.valid.eq(tx_cdc.r_rdy), tx_cdc.r_en.eq(1),
                         tx_store.i.payload.data.eq(beat.data), tx_store.i.payload.keep.eq(beat.keep),
                         tx_store.i.payload.last.eq(beat.last), tx_store.i.payload.bad.eq(0)]
            tx = {"valid": tx_store.o.valid, "ready": Signal(name=f"cmac{p}_tx_ready"),
                  "data": tx_store.o.payload.data, "keep": tx_store.o.payload.keep, "last": tx_store.o.payload.last}
            m.d.comb += tx_store.o.ready.eq(tx["ready"])

            pins = {"refclk_p": getattr(self, f"qsfp{p}_refclk_p"), "refclk_n": getattr(self, f"qsfp{p}_refclk_n"),
                    "rx_p": getattr(self, f"qsfp{p}_rx_p"), "rx_n": getattr(self, f"qsfp{p}_rx_n"),
                    "tx_p": getattr(self, f"qsfp{p}_tx_p"), "tx_n": getattr(self, f"qsfp{p}_tx_n")}
            m.submodules[f"cmac_{p}"] = _cmac(p, pins, clk100_buffered, sys_reset, rx, tx, status)
        return m



def filter_beats(switch):
    """Beats of each ``FrameFilter``: two of the switch's longest frames (and their FCS), a power of two."""
    beats = 2 * -(-(switch.longest_frame + 4) // (WIDTH // 8))
    return 1 << (beats - 1).bit_length()


def alveo_constraints(card=U280, board="alveo-u280"):
    """The XDC of ``SwitchOnAlveo`` on ``card``: pins and I/O standards, the input clocks, and the crossings
    between the switch's clock and each CMAC's user clock (only the asynchronous FIFOs cross them: their
    paths are held to a period of the faster clock, without the clocks' skew)."""
    lines = [f"# {board}: pins, clocks and clock-domain crossings of netreduce's card top (SwitchOnAlveo)",
             "# (written by netreduce.hw.alveo.alveo_constraints from the card's user guide, UG1314; "
             "tests/test_alveo.py checks it)",
             f"# part {card.part}", "",
             "# the 100 MHz system clock: the CMACs' init_clk and, through an MMCM, the switch's clock"]
    p_pin, n_pin = card.sysclk
    lines += [f"set_property PACKAGE_PIN {p_pin} [get_ports sysclk0_p]",
              f"set_property PACKAGE_PIN {n_pin} [get_ports sysclk0_n]",
              "set_property IOSTANDARD LVDS [get_ports {sysclk0_p sysclk0_n}]",
              f"create_clock -period {1e9 / card.sysclk_hz:.3f} -name sysclk0 [get_ports sysclk0_p]", "",
              "# HBM_CATTRIP: driven low (the satellite controller powers the card down when it is high)",
              f"set_property PACKAGE_PIN {card.hbm_cattrip} [get_ports hbm_cattrip]",
              "set_property IOSTANDARD LVCMOS18 [get_ports hbm_cattrip]",
              "set_property PULLTYPE PULLDOWN [get_ports hbm_cattrip]"]
    for p, cage in enumerate(card.qsfp):
        lines += ["", f"# QSFP28 cage {p}: CMAC {cage.cmac_core}, transceivers {cage.gt_group}; "
                      f"the 156.25 MHz reference clock (MGT_SI570_CLOCK{p})",
                  f"set_property PACKAGE_PIN {cage.refclk[0]} [get_ports qsfp{p}_refclk_p]",
                  f"set_property PACKAGE_PIN {cage.refclk[1]} [get_ports qsfp{p}_refclk_n]",
                  f"create_clock -period 6.400 -name qsfp{p}_refclk [get_ports qsfp{p}_refclk_p]"]
        for direction, pairs in (("rx", cage.rx), ("tx", cage.tx)):
            for lane, (pin_p, pin_n) in enumerate(pairs):
                lines += [f"set_property PACKAGE_PIN {pin_p} [get_ports {{qsfp{p}_{direction}_p[{lane}]}}]",
                          f"set_property PACKAGE_PIN {pin_n} [get_ports {{qsfp{p}_{direction}_n[{lane}]}}]"]
    lines += ["", "# crossings: the asynchronous FIFOs between the switch's clock (sync) and each CMAC's user clock",
              "set sync_clk [get_clocks -of_objects [get_pins sync_mmcm/CLKOUT0]]"]
    for p in range(len(card.qsfp)):
        lines += [f"set cmac{p}_clk [get_clocks -of_objects [get_pins cmac_{p}/gt_txusrclk2]]",
                  f"set fastest [expr min([get_property PERIOD $sync_clk], [get_property PERIOD $cmac{p}_clk])]",
                  f"set_max_delay -datapath_only -from $sync_clk -to $cmac{p}_clk $fastest",
                  f"set_max_delay -datapath_only -from $cmac{p}_clk -to $sync_clk $fastest"]
    lines += ["", "# the power-on reset and the MMCM's lock come from the system clock into synchronizers",
              "set_false_path -from [get_clocks sysclk0] -to $sync_clk"]
    return "\n".join(lines) + "\n"


def vivado_script(name, switch, card=U280, board="alveo-u280"):
    """The Tcl that builds ``name`` (``SwitchOnAlveo`` in ``<name>.v``, constraints in ``<board>.xdc``) with
    Vivado in non-project mode: both CMAC IPs, synthesis, place and route, the timing and utilisation
    reports and the bitstream. ``vivado -mode batch -source build_<name>.tcl`` in the build folder."""
    max_packet = min(16383, switch.longest_frame + 4)
    cmacs = " ".join(f"{p} {cage.cmac_core} {cage.gt_group}" for p, cage in enumerate(card.qsfp))
    return "\n".join([
        f"# {board}: netreduce's card top with Vivado (written by netreduce build --board {board})",
        f"#   vivado -mode batch -source build_{name}.tcl",
        f"set part {card.part}",
        "create_project -in_memory -part $part",
        "file mkdir ip",
        f"read_verilog {name}.v",
        "# the CMACs: 4 x 25G CAUI-4, AXI-Stream, RS-FEC, 156.25 MHz reference, FCS inserted on transmit and",
        "# checked and removed on receive (the IP's defaults)",
        f"foreach {{p core group}} {{{cmacs}}} {{",
        "    create_ip -name cmac_usplus -vendor xilinx.com -library ip -version 3.1 -module_name cmac_usplus_$p "
        "-dir ip",
        "    set_property -dict [list CONFIG.CMAC_CAUI4_MODE {1} CONFIG.NUM_LANES {4x25} "
        "CONFIG.GT_REF_CLK_FREQ {156.25} CONFIG.USER_INTERFACE {AXIS} CONFIG.GT_DRP_CLK {100.00} "
        f"CONFIG.INCLUDE_RS_FEC {{1}} CONFIG.RX_MAX_PACKET_LEN {{{max_packet}}} CONFIG.CMAC_CORE_SELECT $core "
        "CONFIG.GT_GROUP_SELECT $group] [get_ips cmac_usplus_$p]",
        "    generate_target all [get_ips cmac_usplus_$p]",
        "    synth_ip [get_ips cmac_usplus_$p]",
        "}",
        f"read_xdc {board}.xdc",
        f"synth_design -top {name} -part $part",
        "opt_design",
        "place_design",
        "phys_opt_design",
        "route_design",
        f"report_timing_summary -file {name}_timing.rpt",
        f"report_utilization -file {name}_utilization.rpt",
        f"write_bitstream -force {name}.bit",
    ]) + "\n"
