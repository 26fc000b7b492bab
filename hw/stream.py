"""Packet streams and the parsed-header record.

A packet stream is an ``amaranth.lib.stream`` interface whose payload is a beat struct: ``data`` with the
first byte on the wire in lane 0 (bits 7..0), ``keep`` with one bit per byte (contiguous from lane 0),
``first`` and ``last``. See docs/ARCHITECTURE.md, "Streams".
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream

from ..wire import PARSED_HEADER_FIELDS, PAYLOAD_VERDICT_FIELDS

__all__ = ["check_width", "FrameBeat", "PayloadBeat", "Verdict", "ParsedHeader", "frame_stream",
           "payload_stream", "header_stream", "byte_lane", "PAYLOAD_VERDICT_FIELDS", "fifo_to_stream",
           "stream_to_fifo"]

WIDTHS = (64, 128, 256, 512, 1024)


def check_width(width):
    if width not in WIDTHS:
        raise ValueError(f"datapath width must be one of {', '.join(map(str, WIDTHS))} bits, not {width!r}")
    return width


def FrameBeat(width):
    """One beat of an Ethernet frame."""
    check_width(width)
    return data.StructLayout({
        "data": unsigned(width),
        "keep": unsigned(width // 8),
        "first": 1,
        "last": 1,
    })


Verdict = data.StructLayout({name: unsigned(bits) for name, bits in PAYLOAD_VERDICT_FIELDS})


def PayloadBeat(width):
    """One beat of a parsed payload; ``verdict`` is meaningful on the beat with ``last`` set."""
    check_width(width)
    return data.StructLayout({
        "data": unsigned(width),
        "keep": unsigned(width // 8),
        "first": 1,
        "last": 1,
        "verdict": Verdict,
    })


ParsedHeader = data.StructLayout({name: unsigned(bits) for name, bits in PARSED_HEADER_FIELDS})


def frame_stream(width):
    return stream.Signature(FrameBeat(width))


def payload_stream(width):
    return stream.Signature(PayloadBeat(width))


def header_stream():
    return stream.Signature(ParsedHeader)


def byte_lane(value, lane):
    """Byte ``lane`` of a data word (lane 0 is the first byte on the wire)."""
    return value[lane * 8:(lane + 1) * 8]


def axi_stream_signature(width, user_width=0):
    """AXI4-Stream as seen by a source (tdata, tkeep, tlast, tuser, tvalid out; tready in)."""
    from amaranth.lib.wiring import In, Out, Signature
    members = {
        "tdata": Out(width),
        "tkeep": Out(width // 8),
        "tlast": Out(1),
        "tvalid": Out(1),
        "tready": In(1),
    }
    if user_width:
        members["tuser"] = Out(user_width)
    return Signature(members)


def axis_to_frames(m, axis, frames):
    """Connect an AXI-Stream sink port ``axis`` to frame stream ``frames`` (``first`` is derived)."""
    from amaranth.hdl import Signal
    between = Signal(init=1)    # the next beat starts a frame
    m.d.comb += [
        frames.valid.eq(axis.tvalid),
        frames.payload.data.eq(axis.tdata),
        frames.payload.keep.eq(axis.tkeep),
        frames.payload.last.eq(axis.tlast),
        frames.payload.first.eq(between),
        axis.tready.eq(frames.ready),
    ]
    with m.If(axis.tvalid & axis.tready):
        m.d.sync += between.eq(axis.tlast)


def frames_to_axis(m, frames, axis, user=None):
    """Connect frame (or payload) stream ``frames`` to an AXI-Stream source port ``axis``."""
    m.d.comb += [
        axis.tvalid.eq(frames.valid),
        axis.tdata.eq(frames.payload.data),
        axis.tkeep.eq(frames.payload.keep),
        axis.tlast.eq(frames.payload.last),
        frames.ready.eq(axis.tready),
    ]
    if user is not None:
        m.d.comb += axis.tuser.eq(user)


def fifo_to_stream(m, fifo, sink):
    """Connect the read side of ``fifo`` (an ``amaranth.lib.fifo`` FIFO) to stream ``sink``, whose payload is
    any shape of the FIFO's width (``wiring.connect`` of ``fifo.r_stream`` asks for the same shape)."""
    m.d.comb += [sink.valid.eq(fifo.r_rdy), sink.payload.eq(fifo.r_data), fifo.r_en.eq(sink.ready)]


def stream_to_fifo(m, source, fifo):
    """Connect stream ``source`` to the write side of ``fifo`` (the payload as the FIFO's word)."""
    m.d.comb += [fifo.w_en.eq(source.valid), fifo.w_data.eq(source.payload), source.ready.eq(fifo.w_rdy)]
