"""Packet streams and the parsed-header record.

A packet stream is an ``amaranth.lib.stream`` interface whose payload is a beat struct: ``data`` with the
first byte on the wire in lane 0 (bits 7..0), ``keep`` with one bit per byte (contiguous from lane 0),
``first`` and ``last``. See docs/ARCHITECTURE.md, "Streams".
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream

from ..wire import PARSED_HEADER_FIELDS, PAYLOAD_VERDICT_FIELDS

__all__ = ["check_width", "FrameBeat", "PayloadBeat", "Verdict", "ParsedHeader", "frame_stream",
           "payload_stream", "header_stream", "byte_lane", "PAYLOAD_VERDICT_FIELDS"]

WIDTHS = (64, 128, 256, 512)


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
