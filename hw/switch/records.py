"""Every frame's header record, held from the parser until the monitor has decided the frame (``HeaderRecords``).

The parser gives each frame a header record of some 970 bits (``ParsedHeader``), of which the connection match
and the monitor decide on a few dozen (``match.MonitoredHeader``); the record itself is needed again only
where the frame leaves or is stored. So the records wait here, in frame order, in block RAM, while the
match and the monitor decide on their fields, and the monitor says what became of each frame in a *fate*
(``Fate``), one a frame, in the same order (docs/ARCHITECTURE.md, "Switch RTL", the records):

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

The records go on to the match (``o``) as they come in (``i``): a record is taken from the parser only when both the
match and the queue take it. Without IPv6 (``ipv6=False``, as the parser is built) the queue holds only the bits the
parser can set: not the IPv6 addresses' upper 96 bits nor the flow label, which are zero (the parser contract's rule
9; Yosys cannot see that in bits read from the parser's block RAM). The queue holds ``depth`` records: the frames
between the parser and the monitor's fates (the match's queue, the frame in the monitor, the fates not yet applied,
which wait only for the emitter to take a record); it never waits on the frames behind it, so a full queue holds the
parser back and nothing more.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...wire import GAP_PSN_SHIFT, PARSED_HEADER_FIELDS
from ..ram import BlockRAMFIFO
from ..stream import ParsedHeader
from .emitter import StoredHeader, stored_header

__all__ = ["HeaderRecords", "Fate", "fate_layout", "RECORD_DEPTH"]

RECORD_DEPTH = 512          # records held: one block RAM's words on the ECP5 (DP16KD, 512 x 36)


class Fate(enum.Enum, shape=2):
    """What becomes of a frame's record (the module's docstring)."""
    NONE = 0
    DROP = 1
    FORWARD = 2
    STORE = 3


def kept_bits(ipv6):
    """``(field, bits)`` of a record that the queue keeps: every bit, or without IPv6 those the parser can set
    (the IPv4 addresses in the low 32 bits of ``ip_src`` and ``ip_dst``, no flow label)."""
    ipv4_only = {} if ipv6 else {"ip_src": 32, "ip_dst": 32, "ip_flow_label": 0}
    return [(name, ipv4_only.get(name, bits)) for name, bits in PARSED_HEADER_FIELDS if ipv4_only.get(name, bits)]


def fate_layout(store_entries):
    """A fate, for a header store of ``store_entries`` entries."""
    return data.StructLayout({"fate": Fate, "gap": 1, "entry": max(1, ceil_log2(store_entries)), "results": 1})


class HeaderRecords(wiring.Component):
    """``HeaderRecords(*, store_entries, ipv6=True, depth=RECORD_DEPTH)``. Ports: ``i`` (the parser's records)
    in, ``o`` (the same, to the match) out; ``fates`` in; ``headers`` (to the emitter), ``store_write`` (the
    header store's write port, of ``store_entries`` entries) and ``stored`` out (the module's docstring);
    ``ipv6``: as the parser is built."""

    def __init__(self, *, store_entries, ipv6=True, depth=RECORD_DEPTH):
        self.depth, self.kept = depth, kept_bits(ipv6)
        self.Fate = fate_layout(store_entries)
        super().__init__({
            "i": In(stream.Signature(ParsedHeader)),
            "o": Out(stream.Signature(ParsedHeader)),
            "fates": In(stream.Signature(self.Fate)),
            "headers": Out(stream.Signature(ParsedHeader)),
            "store_write": In(WritePort.Signature(addr_width=max(1, ceil_log2(store_entries)), shape=StoredHeader)),
            "stored": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = BlockRAMFIFO(width=sum(bits for _, bits in self.kept), depth=self.depth)

        # in: each record to the match and into the queue, in the same clock
        m.d.comb += [
            self.o.payload.eq(self.i.payload),
            self.o.valid.eq(self.i.valid & queue.w_rdy),
            queue.w_data.eq(Cat(*[getattr(self.i.payload, name)[:bits] for name, bits in self.kept])),
            queue.w_en.eq(self.i.valid & self.o.ready),
            self.i.ready.eq(self.o.ready & queue.w_rdy),
        ]

        # out: the fate at the head applied to the record at the head (a fate of no frame takes none)
        fate, record = self.fates.payload, Signal(ParsedHeader)
        m.d.comb += Cat(*[getattr(record, name)[:bits] for name, bits in self.kept]).eq(queue.r_data)
        has_record = fate.fate != Fate.NONE
        forwarding = fate.fate == Fate.FORWARD
        applies = self.fates.valid & (queue.r_rdy | ~has_record) & (self.headers.ready | ~forwarding)
        shifted = Signal(ParsedHeader)
        m.d.comb += [shifted.eq(record), shifted.bth_psn.eq(record.bth_psn + GAP_PSN_SHIFT)]
        m.d.comb += [
            self.headers.valid.eq(self.fates.valid & forwarding & queue.r_rdy),
            self.headers.payload.eq(Mux(fate.gap, shifted, record)),
            self.store_write.en.eq(applies & (fate.fate == Fate.STORE)),
            self.store_write.addr.eq(fate.entry),
            self.store_write.data.eq(stored_header(record)),
            self.stored.eq(applies & fate.results),
            self.fates.ready.eq(applies),
            queue.r_en.eq(applies & has_record),
        ]
        return m
