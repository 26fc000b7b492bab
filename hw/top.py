"""Top-level components with flat, AXI-Stream-named ports, for cocotb and for `netreduce generate`.

Generated Verilog names a port member ``<port>__<member>`` (``s_axis__tdata``), and the clock and reset
``clk`` and ``rst`` (active high, synchronous).
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .deparser import RoceDeparser
from .parser import RoceParser
from .stream import ParsedHeader, Verdict, axi_stream_signature, axis_to_frames, frames_to_axis

__all__ = ["ParserTop", "RocePipelineTop"]


def _record_signature(width):
    return wiring.Signature({"data": Out(width), "valid": Out(1), "ready": In(1)})


class ParserTop(wiring.Component):
    """The parser alone: frames on ``s_axis``; payload on ``m_axis`` with the verdicts in ``tuser``
    (bit 0 ``icrc_ok``, bit 1 ``ipv4_csum_ok``, bit 2 ``len_ok``, valid on ``tlast``); header records on
    ``m_hdr`` (``data`` is a ``ParsedHeader`` flattened, first field in the low bits)."""

    def __init__(self, width=64):
        self.width = width
        super().__init__({
            "s_axis": In(axi_stream_signature(width)),
            "m_axis": Out(axi_stream_signature(width, Verdict.size)),
            "m_hdr": Out(_record_signature(ParsedHeader.size)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = RoceParser(self.width)
        axis_to_frames(m, self.s_axis, parser.i)
        frames_to_axis(m, parser.o, self.m_axis, user=parser.o.payload.verdict)
        m.d.comb += [
            self.m_hdr.valid.eq(parser.hdr.valid),
            self.m_hdr.data.eq(parser.hdr.payload),
            parser.hdr.ready.eq(self.m_hdr.ready),
        ]
        return m


class RocePipelineTop(wiring.Component):
    """Parser then deparser: every frame leaves re-serialized, RoCE frames with a recomputed ICRC and
    IPv4 checksum, or stomped (ICRC inverted) when the parser's verdicts were bad. The top of the
    switch built so far; ``netreduce generate`` emits it."""

    def __init__(self, width=64):
        self.width = width
        super().__init__({
            "s_axis": In(axi_stream_signature(width)),
            "m_axis": Out(axi_stream_signature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = RoceParser(self.width)
        m.submodules.deparser = deparser = RoceDeparser(self.width)
        axis_to_frames(m, self.s_axis, parser.i)
        wiring.connect(m, parser.hdr, deparser.hdr)
        wiring.connect(m, parser.o, deparser.i)
        frames_to_axis(m, deparser.o, self.m_axis)
        return m
