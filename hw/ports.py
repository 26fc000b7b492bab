"""Several Ethernet ports on one frame pipeline: a frame arbiter in front, a frame router behind.

``FrameArbiter(width, ports, beat=None, frame_ports=True)``: ``i[p]`` (``ports`` frame streams of ``beat``,
as for the router) into one ``o``, a whole frame at a time: a port that holds the stream keeps it until its
frame's ``last`` beat; between frames the next port with a valid beat is taken, round robin from the port after the last
one served, so that no port starves. The chosen port's beat goes through in the same clock (no added
latency, one beat per clock); ``port`` shows the port of the beat on ``o``, and ``frame_port`` gives
the port of each frame, one entry per frame in the order of ``o`` (for its header's connection match,
which comes after the frame's first beat): with P > 1 a FIFO of ``FRAME_PORTS_DEPTH`` written at each
first beat (a frame waits to start while it is full), with P = 1 always 0; with ``frame_ports`` false there
is no such FIFO and ``frame_port`` is never valid (a merge of frame streams needs only ``port``). With
``stamp_bits`` the ports hold whole frames (``hw.gearbox.WholeFrames``) and the arbiter takes them oldest
first instead of round robin: between frames, of the ports with a valid beat, the one whose ``stamp[p]``
(the clock the head frame was whole, modulo 2^stamp_bits) is oldest, ties to the lower port; should the
waiting frames' stamps lie half their range apart or more (a frame waited 2^(stamp_bits - 1) clocks) so
that none is older than all the others, the lowest port's. That choice is made a clock ahead, into a
register, from every pair of ports compared side by side, as a frame starts and among the other ports (a
port's next frame, behind the one being taken, is not yet among them): a frame waits at least a clock
after it is offered, and the next one starts in the clock after a frame's last beat.

``FrameRouter(width, ports, beat=None)``: ``i`` to one of ``o[p]``, a whole frame at a time: on a frame's
first beat the parent's ``destination`` (combinational, from that beat) picks the port, which the rest of
the frame follows. One beat per clock; a port that is not ready holds the stream (the frames behind
wait). ``beat`` is the layout of the streams (default ``FrameBeat(width)``; any layout with ``last``,
such as ``hw.egress.EgressBeat``, whose fields go along unread).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .fp.adder import check_int
from .stream import frame_stream

__all__ = ["FrameArbiter", "FrameRouter", "MAX_PORTS", "check_ports"]

MAX_PORTS = 4
FRAME_PORTS_DEPTH = 32      # frames between the arbiter and their headers' match: more than the parser holds


def check_ports(ports):
    return check_int(ports, "ports", 1, MAX_PORTS)


class FrameArbiter(wiring.Component):
    def __init__(self, width, ports, beat=None, frame_ports=True, stamp_bits=0):
        self.width, self.ports, self.frame_ports = width, check_ports(ports), frame_ports
        self.stamp_bits = check_int(stamp_bits, "stamp_bits", 0, 32)
        signature = frame_stream(width) if beat is None else stream.Signature(beat)
        super().__init__({
            "i": In(signature).array(ports),
            "o": Out(signature),
            "port": Out(range(ports)),
            "frame_port": Out(stream.Signature(max(1, ceil_log2(ports)))),
            **({"stamp": In(data.ArrayLayout(stamp_bits, ports))} if stamp_bits else {}),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        holding = Signal()                  # inside a frame: its port keeps the stream
        owner = Signal(range(P))            # the port of that frame
        after = Signal(range(P))            # round robin: search from the port after the last one served
        chosen = Signal(range(P))
        m.d.comb += chosen.eq(owner)
        may_start = Const(1)
        with m.If(~holding):
            if self.stamp_bits:
                # the oldest port is chosen a clock ahead, into a register (its comparisons are too deep
                # for the clock that starts the frame), among the ports with a frame waiting that is not
                # being taken now: the frame in the clock after a frame's last beat starts without a gap
                choice, choice_valid = Signal(range(P)), Signal()
                transfer = self.o.valid & self.o.ready
                eligible = [self.i[p].valid & ~(transfer & (chosen == p)) for p in range(P)]
                oldest, any_eligible = self._oldest(m, eligible)
                m.d.sync += [choice.eq(oldest), choice_valid.eq(any_eligible)]
                m.d.comb += chosen.eq(choice)
                may_start = choice_valid
            else:
                # the first port with a valid beat in the order after, after+1, ... (later matches win)
                for offset in reversed(range(P)):
                    for start in range(P):
                        with m.If((after == start) & self.i[(start + offset) % P].valid):
                            m.d.comb += chosen.eq((start + offset) % P)
        # a frame starts only while its port can be noted
        if P > 1 and self.frame_ports:
            m.submodules.frame_ports = frame_ports = SyncFIFOBuffered(width=len(self.frame_port.payload),
                                                                      depth=FRAME_PORTS_DEPTH)
            may_go = holding | (frame_ports.w_rdy & may_start)
            m.d.comb += [frame_ports.w_en.eq(self.o.valid & self.o.ready & ~holding), frame_ports.w_data.eq(chosen),
                         self.frame_port.valid.eq(frame_ports.r_rdy), self.frame_port.payload.eq(frame_ports.r_data),
                         frame_ports.r_en.eq(self.frame_port.ready)]
        else:
            may_go = holding | may_start
            m.d.comb += [self.frame_port.valid.eq(self.frame_ports), self.frame_port.payload.eq(0)]
        for p in range(P):
            with m.If(chosen == p):
                m.d.comb += [self.o.valid.eq(self.i[p].valid & may_go), self.o.payload.eq(self.i[p].payload),
                             self.i[p].ready.eq(self.o.ready & may_go)]
        m.d.comb += self.port.eq(chosen)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [holding.eq(~self.o.payload.last), owner.eq(chosen)]
            with m.If(self.o.payload.last):
                m.d.sync += after.eq(Mux(chosen == P - 1, 0, chosen + 1))
        return m

    def _oldest(self, m, eligible):
        """The port of the oldest head frame among the ``eligible`` ports (the module's docstring), and whether
        there is one. Every pair of ports is compared side by side from the stamps alone, and eligibility, which
        waits on whether the current frame is being taken, comes in only after: a port wins where it is
        eligible and beats every other eligible port. Port p beats a later port q unless q's frame is older
        (the stamp of p minus q's, modulo, from 1 to under half the range), so of two ports exactly one beats
        the other, ties to the lower. Stamps of waiting frames lie within half the range of each other unless
        a frame waited 2^(stamp_bits - 1) clocks; then no port may beat all others, and the lowest eligible
        port is taken, so the arbiter never stops."""
        P = self.ports

        def older(q, p):        # q's head frame older than p's (the ports' stamps alone)
            # (p's stamp minus q's from 1 to under half the range: not equal, and the difference's top bit clear)
            ahead = (self.stamp[p] - self.stamp[q])[:self.stamp_bits]
            return (self.stamp[p] != self.stamp[q]) & ~ahead[-1]

        beats = {}
        for p in range(P):
            for q in range(p + 1, P):
                beats[p, q] = Signal(name=f"beats_{p}_{q}")     # (a register input's comparison, off eligibility)
                m.d.comb += beats[p, q].eq(~older(q, p))
                beats[q, p] = ~beats[p, q]
        wins = Signal(P)
        for p in range(P):
            win = eligible[p]
            for q in range(P):
                if q != p:
                    win = win & (~eligible[q] | beats[p, q])
            m.d.comb += wins[p].eq(win)
        oldest, lowest = Signal(range(P)), Signal(range(P))
        for p in reversed(range(P)):        # (one-hot: the last match is the only one; the lowest eligible)
            with m.If(wins[p]):
                m.d.comb += oldest.eq(p)
            with m.If(eligible[p]):
                m.d.comb += lowest.eq(p)
        any_eligible = Signal()
        m.d.comb += any_eligible.eq(Cat(*eligible).any())
        return Mux(wins.any(), oldest, lowest), any_eligible


class FrameRouter(wiring.Component):
    def __init__(self, width, ports, beat=None):
        self.width, self.ports = width, check_ports(ports)
        signature = frame_stream(width) if beat is None else stream.Signature(beat)
        super().__init__({
            "i": In(signature),
            "o": Out(signature).array(ports),
            "destination": In(range(ports)),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        inside = Signal()                   # past the first beat of a frame
        route = Signal(range(P))            # the port of that frame
        port = Signal(range(P))
        m.d.comb += port.eq(route)
        with m.If(~inside):
            m.d.comb += port.eq(self.destination)
        for p in range(P):
            m.d.comb += self.o[p].payload.eq(self.i.payload)
            with m.If(port == p):
                m.d.comb += [self.o[p].valid.eq(self.i.valid), self.i.ready.eq(self.o[p].ready)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [inside.eq(~self.i.payload.last), route.eq(port)]
        return m
