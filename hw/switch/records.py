"""Every frame's header record, applied to its fate once the monitor has decided the frame (``HeaderRecords``).

The parser gives each frame a header record of some 970 bits (``ParsedHeader``), of which the connection match
and the monitor decide on a few hundred (the parser's summary, ``match.MatchedHeader``, and of it what the match
hands on, ``match.MonitoredHeader``); the record itself is needed again only where the frame leaves or is
stored. So the records wait in the parser's header FIFO (``RECORD_DEPTH`` of them, in block RAM: the parser
writes each record once, into it and into its summary FIFO), in frame order, while the match and the monitor
decide on the summaries, and the monitor says what became of each frame in a *fate* (``Fate``), one a frame,
in the same order (docs/ARCHITECTURE.md, "Switch RTL", the records):

- ``FORWARD``: the frame goes on (a pass-through, an ACK, a frame of no connection, the answer to a
  duplicate): its record to the emitter (``headers``), with its PSN shifted back by ``GAP_PSN_SHIFT`` where
  ``gap`` says so (a gap's first packet);
- ``STORE``: a contribution: its ``StoredHeader`` into the header store (``store_write``) at ``entry``;
- ``DROP``: the record goes;
- ``NONE``: a fate of no frame, which takes no record: a bounded-loss message completed (``COMPLETE``, by its
  deadline or its last contribution), whose results are queued apart from any frame's commit.

A fate with ``results`` says that a RESULTS descriptor that is not a resend was queued with it, whose
results read the header store: ``stored`` strobes once that fate's record is stored, so the emitter takes
each such descriptor only once every contribution before it is in the store (``emitter.Emitter``).

The header FIFO holds the frames between the parser and the monitor's fates (the summaries' queues, the frame
in the monitor, the fates not yet applied, which wait only for the emitter to take a record); it never waits
on the frames behind it, so a full FIFO holds the parser's input back and nothing more.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...wire import GAP_PSN_SHIFT
from ..stream import ParsedHeader
from .emitter import StoredHeader, stored_header

__all__ = ["HeaderRecords", "Fate", "fate_layout", "RECORD_DEPTH"]

RECORD_DEPTH = 512          # records held in the parser's header FIFO: one block RAM's words on the ECP5 (DP16KD,
                            # 512 x 36)


class Fate(enum.Enum, shape=2):
    """What becomes of a frame's record (the module's docstring)."""
    NONE = 0
    DROP = 1
    FORWARD = 2
    STORE = 3


def fate_layout(store_entries):
    """A fate, for a header store of ``store_entries`` entries."""
    return data.StructLayout({"fate": Fate, "gap": 1, "entry": max(1, ceil_log2(store_entries)), "results": 1})


class HeaderRecords(wiring.Component):
    """``HeaderRecords(*, store_entries)``. Ports: ``records`` (the parser's header records, its header FIFO's
    head) and ``fates`` in; ``headers`` (to the emitter), ``store_write`` (the header store's write port, of
    ``store_entries`` entries) and ``stored`` out (the module's docstring)."""

    def __init__(self, *, store_entries):
        self.Fate = fate_layout(store_entries)
        super().__init__({
            "records": In(stream.Signature(ParsedHeader)),
            "fates": In(stream.Signature(self.Fate)),
            "headers": Out(stream.Signature(ParsedHeader)),
            "store_write": In(WritePort.Signature(addr_width=max(1, ceil_log2(store_entries)), shape=StoredHeader)),
            "stored": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # the fate at the head applied to the record at the head (a fate of no frame takes none)
        fate, record = self.fates.payload, self.records.payload
        has_record = fate.fate != Fate.NONE
        forwarding = fate.fate == Fate.FORWARD
        applies = self.fates.valid & (self.records.valid | ~has_record) & (self.headers.ready | ~forwarding)
        shifted = Signal(ParsedHeader)
        m.d.comb += [shifted.eq(record), shifted.bth_psn.eq(record.bth_psn + GAP_PSN_SHIFT)]
        m.d.comb += [
            self.headers.valid.eq(self.fates.valid & forwarding & self.records.valid),
            self.headers.payload.eq(Mux(fate.gap, shifted, record)),
            self.store_write.en.eq(applies & (fate.fate == Fate.STORE)),
            self.store_write.addr.eq(fate.entry),
            self.store_write.data.eq(stored_header(record)),
            self.stored.eq(applies & fate.results),
            self.fates.ready.eq(applies),
            self.records.ready.eq(applies & has_record),
        ]
        return m
