"""A 1 Gb/s Ethernet MAC on GMII: one byte a clock (125 MHz) each way.

``GmiiRx(max_frame=9216)`` takes ``rx_dv``, ``rx_er`` and ``rxd`` (the PHY's receive side, or an RGMII
receiver's GMII output) and gives ``o``, a stream of ``MacByte`` that cannot wait (``always_ready``: a
PHY cannot be held back). A frame's bytes come out without preamble, SFD or FCS, each marked ``end`` 0;
then one *end marker* (``end`` 1, ``data`` unused) whose ``bad`` says whether to drop the frame:

- a frame starts at the SFD (0xD5) after any number of preamble bytes (0x55), none included; a frame whose
  first byte after its preamble is not the SFD is ignored until ``rx_dv`` falls (``preamble_errors``);
- it ends when ``rx_dv`` falls; its last four bytes are its FCS (least significant byte first, IEEE
  802.3 CRC-32 over the bytes before it), checked with the project's CRC-32 networks (``hw.crc``);
- it is *bad*, counted once, by the first that applies: ``rx_er`` in any of its clocks (``drops_error``);
  more than ``max_frame`` bytes before its FCS (``drops_oversize``; only the first ``max_frame`` come
  out); fewer than 64 bytes with its FCS (``drops_runt``); a wrong FCS (``drops_fcs``). A good frame
  counts in ``frames_good``.

Counters are 32 bits and wrap; a frame is counted two clocks after ``rx_dv`` falls. ``o`` (from a
register) gives a frame's bytes five clocks late (the FCS is known only at the end), and its end marker
two clocks after ``rx_dv`` falls.

``GmiiTx()`` takes ``i``, a stream of ``TxByte`` (``data``, ``last``), and drives ``tx_en``, ``tx_er``
and ``txd`` from registers (one clock after its state decides them, for the pins' DDR registers): for
each frame, 7 preamble bytes and the SFD, its bytes, zero padding up to 60 bytes, its FCS, then at least
12 clocks of inter-frame gap. ``i.ready`` is high only while the frame's bytes are
sent, one a clock: once a frame has started, its source must give a byte every clock up to its ``last``
(the switch's egress stage never pauses inside a frame). If it does not (*underrun*), the byte goes out
with ``tx_er`` set, so that the receiver drops the frame, the rest of the frame is taken and thrown away
as fast as it comes, and ``underruns`` counts it.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..wire import ETH_FCS_BYTES, ETH_GAP_BYTES, ETH_MIN_FRAME, ETH_PREAMBLE_BYTES
from .crc import RAW_RESIDUE, crc_update
from .fp.adder import check_int

__all__ = ["MacByte", "TxByte", "GmiiRx", "GmiiTx", "PREAMBLE", "SFD", "MIN_FRAME", "IFG_CLOCKS"]

PREAMBLE, SFD = 0x55, 0xD5
MIN_FRAME = ETH_MIN_FRAME + ETH_FCS_BYTES     # bytes of the shortest frame, FCS included (64)
FCS_BYTES = ETH_FCS_BYTES
PREAMBLE_BYTES = ETH_PREAMBLE_BYTES
IFG_CLOCKS = ETH_GAP_BYTES      # the inter-frame gap: 96 bit times, a byte a clock
COUNTER_BITS = 32
CRC_INIT = 0xFFFFFFFF           # the raw CRC state before a frame's first byte (hw/crc.py conventions)

MacByte = data.StructLayout({"data": 8, "end": 1, "bad": 1})
TxByte = data.StructLayout({"data": 8, "last": 1})


class GmiiRx(wiring.Component):
    """The receive side (module documentation)."""

    rx_dv: In(1)
    rx_er: In(1)
    rxd: In(8)
    o: Out(stream.Signature(MacByte, always_ready=True))
    frames_good: Out(COUNTER_BITS)
    drops_fcs: Out(COUNTER_BITS)
    drops_runt: Out(COUNTER_BITS)
    drops_error: Out(COUNTER_BITS)
    drops_oversize: Out(COUNTER_BITS)
    preamble_errors: Out(COUNTER_BITS)

    def __init__(self, max_frame=9216):
        try:
            self.max_frame = check_int(max_frame, "max_frame (bytes)", MIN_FRAME - FCS_BYTES, 1 << 16)
        except ValueError:
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        held = Signal(8 * FCS_BYTES)            # the last four bytes (the FCS, if the frame ends here)
        held_count = Signal(range(FCS_BYTES + 1))
        length = Signal(range(self.max_frame + FCS_BYTES + 2))     # bytes so far, saturating
        crc = Signal(32)
        error = Signal()
        next_crc = crc_update(m, crc, self.rxd, 1)

        def count(counter):
            m.d.sync += counter.eq(counter + 1)

        # ``o`` from a register: the length and FCS checks that decide a byte's ``valid`` and an end's ``bad``
        # stay out of what takes it (the packing into beats and the clock crossing, at 125 MHz on the ECP5)
        out = stream.Signature(MacByte).create(path=("out",))
        m.d.sync += [self.o.valid.eq(out.valid), self.o.payload.eq(out.payload)]

        # a frame's verdict is counted the clock after its end, from registers: the FCS comparison and the
        # checks' priority stay out of the counters' adders (125 MHz on the ECP5)
        ended, ended_error, ended_oversize, ended_runt, ended_fcs = (
            Signal(name=f"ended{suffix}") for suffix in ("", "_error", "_oversize", "_runt", "_fcs"))
        m.d.sync += ended.eq(0)
        with m.If(ended):
            with m.If(ended_error):
                count(self.drops_error)
            with m.Elif(ended_oversize):
                count(self.drops_oversize)
            with m.Elif(ended_runt):
                count(self.drops_runt)
            with m.Elif(ended_fcs):
                count(self.drops_fcs)
            with m.Else():
                count(self.frames_good)

        with m.FSM(name="rx"):
            with m.State("IDLE"):
                with m.If(self.rx_dv):
                    with m.If(self.rxd == SFD):
                        m.next = "FRAME"
                    with m.Elif(self.rxd == PREAMBLE):
                        m.next = "PREAMBLE"
                    with m.Else():
                        count(self.preamble_errors)
                        m.next = "DISCARD"
                m.d.sync += [held_count.eq(0), length.eq(0), crc.eq(CRC_INIT), error.eq(0)]
            with m.State("PREAMBLE"):
                with m.If(~self.rx_dv):
                    count(self.preamble_errors)
                    m.next = "IDLE"
                with m.Elif(self.rxd == SFD):
                    m.next = "FRAME"
                with m.Elif(self.rxd != PREAMBLE):
                    count(self.preamble_errors)
                    m.next = "DISCARD"
            with m.State("FRAME"):
                with m.If(self.rx_dv):
                    m.d.sync += [held.eq(Cat(held[8:], self.rxd)), crc.eq(next_crc), error.eq(error | self.rx_er),
                                 length.eq(Mux(length == self.max_frame + FCS_BYTES + 1, length, length + 1))]
                    with m.If(held_count == FCS_BYTES):
                        # the oldest held byte is not FCS: out, if within max_frame
                        m.d.comb += [out.valid.eq(length <= self.max_frame + FCS_BYTES - 1),
                                     out.payload.data.eq(held[:8])]
                    with m.Else():
                        m.d.sync += held_count.eq(held_count + 1)
                with m.Else():
                    oversize = length > self.max_frame + FCS_BYTES
                    runt = length < MIN_FRAME
                    bad_fcs = crc != RAW_RESIDUE
                    m.d.comb += [out.valid.eq(1), out.payload.end.eq(1),
                                 out.payload.bad.eq(error | oversize | runt | bad_fcs)]
                    m.d.sync += [ended.eq(1), ended_error.eq(error), ended_oversize.eq(oversize),
                                 ended_runt.eq(runt), ended_fcs.eq(bad_fcs)]
                    m.next = "IDLE"
            with m.State("DISCARD"):
                with m.If(~self.rx_dv):
                    m.next = "IDLE"
        return m


class GmiiTx(wiring.Component):
    """The transmit side (module documentation)."""

    i: In(stream.Signature(TxByte))
    tx_en: Out(1)
    tx_er: Out(1)
    txd: Out(8)
    frames_sent: Out(COUNTER_BITS)
    underruns: Out(COUNTER_BITS)

    def elaborate(self, platform):
        m = Module()
        # what goes on the wire in the next clock: the outputs are registered (straight into the pins' DDR
        # registers on a board)
        tx_en, tx_er, txd = Signal(), Signal(), Signal(8)
        m.d.sync += [self.tx_en.eq(tx_en), self.tx_er.eq(tx_er), self.txd.eq(txd)]
        step = Signal(range(max(PREAMBLE_BYTES, IFG_CLOCKS) + 1))
        sent = Signal(range(MIN_FRAME - FCS_BYTES + 1))        # frame bytes sent, up to the padded minimum
        crc = Signal(32)
        fcs = Signal(32)
        m.d.comb += fcs.eq(~crc)
        next_crc = crc_update(m, crc, txd, 1)
        filled = sent + 1 >= MIN_FRAME - FCS_BYTES               # with this clock's byte

        with m.FSM(name="tx"):
            with m.State("IDLE"):
                m.d.sync += [step.eq(0), sent.eq(0), crc.eq(CRC_INIT)]
                with m.If(self.i.valid):
                    m.next = "PREAMBLE"
            with m.State("PREAMBLE"):
                m.d.comb += [tx_en.eq(1), txd.eq(Mux(step == PREAMBLE_BYTES, SFD, PREAMBLE))]
                m.d.sync += step.eq(step + 1)
                with m.If(step == PREAMBLE_BYTES):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [tx_en.eq(1), tx_er.eq(~self.i.valid), self.i.ready.eq(1)]
                with m.If(self.i.valid):
                    m.d.comb += txd.eq(self.i.payload.data)
                m.d.sync += [crc.eq(next_crc), sent.eq(Mux(filled, sent, sent + 1)), step.eq(0)]
                with m.If(~self.i.valid):
                    m.d.sync += self.underruns.eq(self.underruns + 1)
                    m.next = "FLUSH"
                with m.Elif(self.i.payload.last & filled):
                    m.next = "FCS"
                with m.Elif(self.i.payload.last):
                    m.next = "PAD"
            with m.State("PAD"):
                m.d.comb += [tx_en.eq(1), txd.eq(0)]
                m.d.sync += [crc.eq(next_crc), sent.eq(sent + 1)]
                with m.If(filled):
                    m.next = "FCS"
            with m.State("FCS"):
                # the FCS of the bytes sent, least significant byte first
                m.d.comb += [tx_en.eq(1), txd.eq(fcs.word_select(step[:2], 8))]
                m.d.sync += step.eq(step + 1)
                with m.If(step == FCS_BYTES - 1):
                    m.d.sync += [step.eq(0), self.frames_sent.eq(self.frames_sent + 1)]
                    m.next = "GAP"
            with m.State("FLUSH"):
                # an underrun: the rest of the frame is thrown away as it comes, then the gap
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid & self.i.payload.last):
                    m.d.sync += step.eq(0)
                    m.next = "GAP"
            with m.State("GAP"):
                m.d.sync += step.eq(step + 1)
                with m.If(step == IFG_CLOCKS - 1):
                    m.d.sync += [step.eq(0), sent.eq(0), crc.eq(CRC_INIT)]
                    with m.If(self.i.valid):            # the next frame starts right after the gap
                        m.next = "PREAMBLE"
                    with m.Else():
                        m.next = "IDLE"
        return m
