"""One 1 Gb/s Ethernet port of a board, from GMII to the switch's frame streams and back.

``EthernetPort(width, *, max_frame=9216, rx_domain="rx", tx_domain="tx", filter_bytes=None)``:

receive (``rx_domain``, the PHY's receive clock)
    ``rx_dv``, ``rx_er``, ``rxd`` -> ``GmiiRx`` -> ``MacToBeats`` -> an asynchronous FIFO into ``sync``
    -> ``FrameFilter`` -> ``o``: whole good frames only, each at one beat per clock (store and forward).
transmit (``tx_domain``, 125 MHz)
    ``i`` (``sync``) -> an asynchronous FIFO into ``tx_domain`` -> ``BeatsToBytes`` -> ``GmiiTx`` ->
    ``tx_en``, ``tx_er``, ``txd``.

Nothing on the receive side can wait (a PHY cannot be held back): the ``sync`` clock must take the
receive FIFO's beats faster than they come, that is run at more than 125 MHz / (``width`` / 8) (15.6 MHz
at 64 bits); the FrameFilter always takes them. On the transmit side a frame must reach the MAC at
least as fast as it leaves (one byte a clock): the switch's egress stage gives a frame without a pause,
and the ``sync`` clock is faster than a beat per ``width / 8`` transmit clocks, so ``GmiiTx`` never runs
dry inside a frame.

Counters (32 bits, ``netreduce.registers.ETHERNET_COUNTERS``, the register map's ``ethernet`` block), all in
``sync``: ``rx_good``, ``rx_drops_fcs``, ``rx_drops_runt``, ``rx_drops_error``, ``rx_drops_oversize``,
``rx_preamble_errors`` (``GmiiRx``), ``rx_drops_full`` (``FrameFilter``: frames that found no room),
``tx_frames``, ``tx_underruns`` (``GmiiTx``). Those the MAC keeps in the receive and transmit clocks are
counted again in ``sync`` from their lowest bit (``hw.cdc.EventCounter``), a few clocks late, so that
nothing wide crosses (their events are frames, far apart; a broken preamble can come faster, and such
errors closer than three ``sync`` clocks may count as one).
"""

from amaranth.hdl import DomainRenamer, Module
from amaranth.lib import data, wiring
from amaranth.lib.fifo import AsyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..registers import ETHERNET_COUNTERS
from .cdc import EventCounter
from .framing import BeatsToBytes, FrameFilter, MacToBeats, RxBeat
from .mac import GmiiRx, GmiiTx
from .stream import FrameBeat, check_width, frame_stream

__all__ = ["EthernetPort", "EthernetStatus", "CDC_DEPTH"]

CDC_DEPTH = 16          # beats in each clock-domain crossing
COUNTER_BITS = 32
# a port's counters, in ``sync``, as the switch's registers take them
EthernetStatus = data.StructLayout(dict.fromkeys(ETHERNET_COUNTERS, COUNTER_BITS))


class EthernetPort(wiring.Component):
    """A board's Ethernet port on GMII (module documentation). ``filter_bytes``: the receive buffer of
    ``FrameFilter`` (default two largest frames, rounded up to a power of two of beats)."""

    COUNTERS = tuple(ETHERNET_COUNTERS)

    def __init__(self, width, *, max_frame=9216, rx_domain="rx", tx_domain="tx", filter_bytes=None):
        self.width = check_width(width)
        self.max_frame, self.rx_domain, self.tx_domain = max_frame, rx_domain, tx_domain
        beat_bytes = width // 8
        filter_bytes = filter_bytes or 2 * max_frame
        self.filter_beats = 1 << max(1, (-(-filter_bytes // beat_bytes) - 1).bit_length())
        super().__init__({
            "rx_dv": In(1), "rx_er": In(1), "rxd": In(8),
            "tx_en": Out(1), "tx_er": Out(1), "txd": Out(8),
            "o": Out(frame_stream(width)),
            "i": In(frame_stream(width)),
            **{name: Out(COUNTER_BITS) for name in self.COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        W, rx, tx = self.width, self.rx_domain, self.tx_domain
        rename_rx, rename_tx = DomainRenamer(rx), DomainRenamer(tx)

        # receive
        m.submodules.mac_rx = mac_rx = rename_rx(GmiiRx(max_frame=self.max_frame))
        m.submodules.pack = pack = rename_rx(MacToBeats(W))
        m.submodules.rx_cdc = rx_cdc = AsyncFIFOBuffered(width=RxBeat(W).size, depth=CDC_DEPTH,
                                                         w_domain=rx, r_domain="sync")
        m.submodules.filter = frame_filter = FrameFilter(W, self.filter_beats)
        m.d.comb += [
            mac_rx.rx_dv.eq(self.rx_dv), mac_rx.rx_er.eq(self.rx_er), mac_rx.rxd.eq(self.rxd),
            pack.i.valid.eq(mac_rx.o.valid), pack.i.payload.eq(mac_rx.o.payload),
            rx_cdc.w_en.eq(pack.o.valid), rx_cdc.w_data.eq(pack.o.payload),
            frame_filter.i.valid.eq(rx_cdc.r_rdy), frame_filter.i.payload.eq(rx_cdc.r_data),
            rx_cdc.r_en.eq(1),
        ]
        wiring.connect(m, frame_filter.o, wiring.flipped(self.o))

        # transmit
        m.submodules.tx_cdc = tx_cdc = AsyncFIFOBuffered(width=FrameBeat(W).size, depth=CDC_DEPTH,
                                                         w_domain="sync", r_domain=tx)
        m.submodules.unpack = unpack = rename_tx(BeatsToBytes(W))
        m.submodules.mac_tx = mac_tx = rename_tx(GmiiTx())
        m.d.comb += [
            tx_cdc.w_en.eq(self.i.valid), tx_cdc.w_data.eq(self.i.payload), self.i.ready.eq(tx_cdc.w_rdy),
            unpack.i.valid.eq(tx_cdc.r_rdy), unpack.i.payload.eq(data.View(FrameBeat(W), tx_cdc.r_data)),
            tx_cdc.r_en.eq(unpack.i.ready),
            self.tx_en.eq(mac_tx.tx_en), self.tx_er.eq(mac_tx.tx_er), self.txd.eq(mac_tx.txd),
        ]
        wiring.connect(m, unpack.o, mac_tx.i)

        # the counters, in ``sync``
        kept = {"rx_good": (rx, mac_rx.frames_good), "rx_drops_fcs": (rx, mac_rx.drops_fcs),
                "rx_drops_runt": (rx, mac_rx.drops_runt), "rx_drops_error": (rx, mac_rx.drops_error),
                "rx_drops_oversize": (rx, mac_rx.drops_oversize), "rx_preamble_errors": (rx, mac_rx.preamble_errors),
                "rx_drops_full": ("sync", frame_filter.drops_full),
                "tx_frames": (tx, mac_tx.frames_sent), "tx_underruns": (tx, mac_tx.underruns)}
        assert set(kept) == set(self.COUNTERS)
        for name, (domain, count) in kept.items():
            if domain == "sync":
                m.d.comb += getattr(self, name).eq(count)
                continue
            m.submodules[f"{name}_events"] = events = EventCounter(COUNTER_BITS, i_domain=domain)
            m.d.comb += [events.toggle.eq(count[0]), getattr(self, name).eq(events.count)]
        return m
