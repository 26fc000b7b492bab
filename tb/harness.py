"""A synthesizable player and recorder around a device under test, so that simulations run free.

Python touching every clock (a bus model awaiting each edge) limits a cocotb simulation to some thousand
clocks per second. Here the device's streams are driven and sampled by hardware instead:

- a :class:`Player` per input stream plays frames from a ring of beats that Python fills, in batches and
  in zero simulated time, through the simulator's access to the ring's memory; each frame may wait until
  given numbers of frames have come out of the device and gone into it (the causality of a recorded
  run: an ACK never overtakes the result it acknowledges);
- a :class:`Recorder` per output stream writes every beat it takes, with the clock it was taken in, into
  a ring that Python reads in batches;
- idle cycles and backpressure come from a pseudo-random generator in each of them, so a run with random
  pauses runs free too.

Python sets the inputs of :class:`Harness` (ring fill levels, pause probabilities) and reads its outputs
(ring levels, counters) between stretches of free-running simulation; tb/harness_driver.py is that side.
Every count is of 32 bits and wraps; a ring index is its count modulo the ring's depth.
"""

from amaranth.hdl import Const, Module, Mux, ResetSignal, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..hw.fp.adder import check_int

__all__ = ["PauseGenerator", "Player", "Recorder", "Harness", "beat_layout", "FrameGate", "FrameStamp",
           "probability_threshold", "stream_layout", "PAUSE_BITS"]

PAUSE_BITS = 16         # a pause probability p is the threshold round(p * 2**16) on 16 random bits

FrameGate = data.StructLayout({
    "after_out": unsigned(32),      # frames out of the device (all recorders with ``counts_frames``)
    "after_in": unsigned(32),       # frames into the device (all players)
    "line_bits": unsigned(32),      # the frame's time on its line, in bits (``netreduce.wire.line_bytes``)
})

FrameStamp = data.StructLayout({
    "first": unsigned(32),          # the clock the frame's first beat was taken
    "last": unsigned(32),           # the clock its last beat was taken
    "refused": unsigned(32),        # clocks in which a beat of it was offered and not taken
    "line_ahead": unsigned(32),     # with a line pace: the line's bits past the frame's start when it started
})


def beat_layout(width, user_width=0):
    """One AXI-Stream beat as a player or a recorder keeps it."""
    fields = {"data": unsigned(width), "keep": unsigned(width // 8), "last": unsigned(1)}
    if user_width:
        fields["user"] = unsigned(user_width)
    return data.StructLayout(fields)


def probability_threshold(probability):
    """The pause threshold of a probability from 0 to 1."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"a pause probability is from 0 to 1, not {probability!r}")
    return min(round(probability * (1 << PAUSE_BITS)), (1 << PAUSE_BITS))


class PauseGenerator(wiring.Component):
    """``pause`` is high in a clock with probability ``threshold / 2**16``: a 32-bit xorshift generator
    (Marsaglia's 13, 17, 5), loaded with ``seed`` (made odd, never zero) while the domain is in reset."""

    threshold: In(PAUSE_BITS + 1)
    seed: In(32)
    pause: Out(1)

    def elaborate(self, platform):
        m = Module()
        state = Signal(32, init=0x2545F491, reset_less=True)
        x1 = Signal(32)
        x2 = Signal(32)
        x3 = Signal(32)
        m.d.comb += [
            x1.eq(state ^ (state << 13)[:32]),
            x2.eq(x1 ^ (x1 >> 17)),
            x3.eq(x2 ^ (x2 << 5)[:32]),
            self.pause.eq(state[32 - PAUSE_BITS:] < self.threshold),
        ]
        with m.If(ResetSignal()):
            m.d.sync += state.eq(self.seed | 1)
        with m.Else():
            m.d.sync += state.eq(x3)
        return m


def _stream(layout):
    return wiring.Signature({"valid": Out(1), "ready": In(1), "payload": Out(layout)})


class Player(wiring.Component):
    """Plays the frames of a ring of beats into a stream.

    ``beats`` holds beat ``k`` at lane ``k mod lanes`` of word ``(k mod depth) // lanes`` (a word of
    ``lanes`` beats, so that Python moves several beats per access); ``gates`` (``frames`` entries of
    :data:`FrameGate`) holds frame ``f``'s gate at ``f mod frames``. Python writes whole frames and then
    raises ``loaded`` (the beats written so far); the player offers beat ``played`` while ``played !=
    loaded``, a first beat only once ``frames_out >= after_out`` and ``frames_in >= after_in`` of its gate,
    and pauses with probability ``idle`` (never withdrawing a beat it offers). With ``line_rate`` (bits of a
    line per clock; 0: none) it plays a line's pace: a frame starts only once the line has carried the frames
    before it (each its gate's ``line_bits``), and its beats then go back to back, as from a MAC's whole-frame
    buffer; the line runs on while a frame waits to be taken (its stamp's ``line_ahead``: how far the line got
    ahead, a MAC's backlog) and stops while none waits. At each frame's last beat it
    writes the frame's :data:`FrameStamp` into ``stamps`` at ``f mod frames``, and counts the frame in
    ``taken``. Python may overwrite a word once ``played`` is past every beat in it.
    """

    def __init__(self, layout, *, depth=4096, frames=1024, lanes=4):
        for name, value in (("depth", depth), ("frames", frames), ("lanes", lanes)):
            check_int(value, name, 1, 1 << 20)
            if value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if lanes > depth:
            raise ValueError(f"a ring of {depth} beats cannot have words of {lanes}")
        self.layout, self.depth, self.frames, self.lanes = layout, depth, frames, lanes
        self.beats = memory.Memory(shape=data.ArrayLayout(layout, lanes), depth=depth // lanes, init=[])
        self.gates = memory.Memory(shape=FrameGate, depth=frames, init=[])
        self.stamps = memory.Memory(shape=FrameStamp, depth=frames, init=[])
        super().__init__({
            "o": Out(_stream(layout)),
            "loaded": In(32), "played": Out(32), "taken": Out(32),
            "frames_out": In(32), "frames_in": In(32), "cycle": In(32),
            "idle": In(PAUSE_BITS + 1), "seed": In(32), "line_rate": In(16),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ring_beats = beats = self.beats
        m.submodules.ring_gates = gates = self.gates
        m.submodules.ring_stamps = stamps = self.stamps
        m.submodules.pauses = pauses = PauseGenerator()
        beat = beats.read_port(domain="comb")
        gate = gates.read_port(domain="comb")
        stamp = stamps.write_port()

        inside = Signal()           # a frame has begun and not ended
        holding = Signal()          # a beat was offered and not taken: it stays offered
        first = Signal(32)
        refused = Signal(32)
        open_gate = (self.frames_out - gate.data.after_out)[31] == 0     # modulo 2**32
        open_gate &= (self.frames_in - gate.data.after_in)[31] == 0
        # the line's pace: the bits the line has delivered past the frames started (negative: the last frame's
        # line time is not over); it counts on while a frame waits (a MAC's buffer holds what the line brings),
        # and stops at 0 while none does (an idle line brings nothing)
        line = Signal(signed(34))
        refilled = Signal(signed(34))
        starts = self.o.valid & self.o.ready & ~inside
        frame_waits = (self.played != self.loaded) & (inside | open_gate)
        m.d.comb += refilled.eq(line + self.line_rate)
        with m.If(self.line_rate != 0):
            with m.If(starts):
                m.d.sync += line.eq(refilled - gate.data.line_bits)
            with m.Elif(frame_waits):
                m.d.sync += line.eq(refilled)
            with m.Else():
                m.d.sync += line.eq(Mux(refilled < 0, refilled, 0))
        open_gate &= (self.line_rate == 0) | (line >= 0)
        line_ahead = Signal(32)     # the line's bits past this frame's start when it started: a MAC's backlog
        with m.If(starts):      # (``line`` stays 0 without a line pace)
            m.d.sync += line_ahead.eq(line)
        lane_bits = exact_log2(self.lanes)
        m.d.comb += [
            pauses.threshold.eq(self.idle),
            pauses.seed.eq(self.seed),
            beat.addr.eq(self.played[lane_bits:]),
            gate.addr.eq(self.taken),
            self.o.payload.eq(beat.data[self.played[:lane_bits]] if lane_bits else beat.data[0]),
            self.o.valid.eq((self.played != self.loaded) & (inside | open_gate) & (holding | ~pauses.pause)),
        ]
        m.d.sync += holding.eq(self.o.valid & ~self.o.ready)
        with m.If(self.o.valid & ~self.o.ready):
            m.d.sync += refused.eq(refused + 1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [self.played.eq(self.played + 1), inside.eq(~self.o.payload.last)]
            with m.If(~inside):
                m.d.sync += first.eq(self.cycle)
            with m.If(self.o.payload.last):
                m.d.comb += [
                    stamp.addr.eq(self.taken),
                    stamp.en.eq(1),
                    stamp.data.first.eq(Mux(inside, first, self.cycle)),
                    stamp.data.last.eq(self.cycle),
                    stamp.data.refused.eq(refused),
                    stamp.data.line_ahead.eq(Mux(inside, line_ahead, line)),
                ]
                m.d.sync += [self.taken.eq(self.taken + 1), refused.eq(0)]
        return m


class Recorder(wiring.Component):
    """Takes a stream into a ring: beat ``k`` taken in clock ``c`` goes, with ``c``, to lane ``k mod
    lanes`` of word ``(k mod depth) // lanes``.

    Python reads the ring and raises ``consumed``; the recorder refuses beats while the ring is full and,
    with probability ``backpressure``, in any clock. ``frames`` counts last beats (every beat, for a stream
    without ``last``); ``pauses`` counts clocks in which a frame had begun and not ended and no beat was
    offered (a MAC's transmit side cannot wait inside a frame).
    """

    def __init__(self, layout, *, depth=4096, lanes=4):
        for name, value in (("depth", depth), ("lanes", lanes)):
            check_int(value, name, 1, 1 << 20)
            if value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if lanes > depth:
            raise ValueError(f"a ring of {depth} beats cannot have words of {lanes}")
        self.layout, self.depth, self.lanes = layout, depth, lanes
        self.entry = data.StructLayout({"beat": layout, "cycle": unsigned(32)})
        self.entries = memory.Memory(shape=data.ArrayLayout(self.entry, lanes), depth=depth // lanes, init=[])
        super().__init__({
            "i": In(_stream(layout)),
            "recorded": Out(32), "consumed": In(32), "frames": Out(32), "pauses": Out(32),
            "cycle": In(32), "backpressure": In(PAUSE_BITS + 1), "seed": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ring_entries = entries = self.entries
        m.submodules.pauses = pauses = PauseGenerator()
        entry = entries.write_port(granularity=1)
        inside = Signal()
        has_last = "last" in self.layout.members
        last = self.i.payload.last if has_last else 1
        room = (self.recorded - self.consumed)[:32] < self.depth
        lane_bits = exact_log2(self.lanes)
        taken = self.i.valid & self.i.ready
        m.d.comb += [
            pauses.threshold.eq(self.backpressure),
            pauses.seed.eq(self.seed),
            self.i.ready.eq(room & ~pauses.pause),
            entry.addr.eq(self.recorded[lane_bits:]),
            entry.en.eq(Mux(taken, Const(1, self.lanes) << self.recorded[:lane_bits], 0)),
        ]
        for lane in range(self.lanes):
            m.d.comb += [entry.data[lane].beat.eq(self.i.payload), entry.data[lane].cycle.eq(self.cycle)]
        with m.If(taken):
            m.d.sync += [self.recorded.eq(self.recorded + 1), inside.eq(~last)]
            with m.If(last):
                m.d.sync += self.frames.eq(self.frames + 1)
        with m.If(inside & ~self.i.valid):
            m.d.sync += self.pauses.eq(self.pauses + 1)
        return m


def PlayerControl():
    """A player's port at the harness top, as Python (the master) sees it."""
    return wiring.Signature({"loaded": Out(32), "played": In(32), "taken": In(32),
                             "idle": Out(PAUSE_BITS + 1), "seed": Out(32), "line_rate": Out(16)})


def RecorderControl():
    """A recorder's port at the harness top, as Python (the master) sees it."""
    return wiring.Signature({"recorded": In(32), "consumed": Out(32), "frames": In(32), "pauses": In(32),
                             "backpressure": Out(PAUSE_BITS + 1), "seed": Out(32)})


def stream_layout(kind, width, user=0):
    """The layout a player or recorder keeps of a device port: an AXI-Stream beat (``kind`` "axis") or a
    record (``kind`` "record": ``data`` alone)."""
    if kind == "axis":
        return beat_layout(width, user)
    return data.StructLayout({"data": unsigned(width)})


def _describe(port):
    """(kind, width, user bits) of a device port: an AXI-Stream port (``tdata``, ``tkeep``, ``tlast``,
    optional ``tuser``) or a record port (``data``, ``valid``, ``ready``)."""
    if hasattr(port, "tdata"):
        return "axis", len(port.tdata), len(port.tuser) if hasattr(port, "tuser") else 0
    return "record", len(port.data), 0


def _handshake(port, kind):
    """(valid, ready, {payload field: signal}) of a device port."""
    if kind == "record":
        return port.valid, port.ready, {"data": port.data}
    fields = {"data": port.tdata, "keep": port.tkeep, "last": port.tlast}
    if hasattr(port, "tuser"):
        fields["user"] = port.tuser
    return port.tvalid, port.tready, fields


def _ports(component, names):
    """The ports ``names`` of ``component``, an array member counting as its elements."""
    found = []
    for name in names:
        port = getattr(component, name)
        found.extend(port if isinstance(port, list) else [port])
    return found


class Harness(wiring.Component):
    """A device under test with a :class:`Player` on each port of its ``inputs`` and a :class:`Recorder` on
    each port of its ``outputs`` (names of AXI-Stream or record ports, or of arrays of them).

    Every port of the device is also at the top under its own name: with ``bypass`` high the device's
    input and output ports are joined to those top ports instead of the players and recorders, so that
    a bus model that works clock by clock (a MAC model, an interactive network) runs on the same build.
    ``frame_outputs`` (names among ``outputs``) count in the players' ``after_out`` gates (by default all).
    Further top ports: ``play[i]`` (:func:`PlayerControl`), ``record[j]`` (:func:`RecorderControl`),
    ``cycle`` (clocks since reset). In the generated Verilog the rings are the memories
    ``player_<i>.ring_beats``, ``player_<i>.ring_gates``, ``player_<i>.ring_stamps`` and
    ``recorder_<j>.ring_entries`` (the names that sim/runner.py makes visible to the simulator);
    :meth:`description` tells the Python side their layouts."""

    def __init__(self, dut, *, inputs, outputs, frame_outputs=None, play_depth=4096, play_frames=1024,
                 record_depth=4096, lanes=4):
        self.dut = dut
        self.input_names, self.output_names = tuple(inputs), tuple(outputs)
        self.frame_output_names = self.output_names if frame_outputs is None else tuple(frame_outputs)
        self.inputs = [_describe(port) for port in _ports(dut, inputs)]
        self.outputs = [_describe(port) for port in _ports(dut, outputs)]
        self.lanes = lanes
        self.players = [Player(stream_layout(*d), depth=play_depth, frames=play_frames, lanes=lanes)
                        for d in self.inputs]
        self.recorders = [Recorder(stream_layout(*d), depth=record_depth, lanes=lanes) for d in self.outputs]
        members = {"play": In(PlayerControl()).array(len(self.inputs)),
                   "record": In(RecorderControl()).array(len(self.outputs)),
                   "cycle": Out(32), "bypass": In(1)}
        members.update(dut.signature.members)
        super().__init__(members)

    def description(self):
        """What the Python side needs to pack and unpack the rings (JSON-able)."""
        def stream(kind, width, user):
            return {"kind": kind, "width": width, "user": user}
        return {
            "players": [stream(*d) for d in self.inputs],
            "recorders": [stream(*d) for d in self.outputs],
            "play_depth": self.players[0].depth if self.players else 0,
            "play_frames": self.players[0].frames if self.players else 0,
            "record_depth": self.recorders[0].depth if self.recorders else 0,
            "lanes": self.lanes,
        }

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        m.d.sync += self.cycle.eq(self.cycle + 1)
        for name in dut.signature.members:
            if name not in self.input_names + self.output_names:
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(dut, name))
        counted = {id(port) for port in _ports(dut, self.frame_output_names)}
        frames_in = sum((player.taken for player in self.players), start=0)
        outputs = _ports(dut, self.output_names)
        frames_out = sum((recorder.frames for recorder, port in zip(self.recorders, outputs, strict=True)
                          if id(port) in counted), start=0)

        ports = zip(self.players, _ports(dut, self.input_names), _ports(self, self.input_names), self.inputs,
                    strict=True)
        for i, (player, port, top, (kind, _, _)) in enumerate(ports):
            m.submodules[f"player_{i}"] = player
            control = self.play[i]
            m.d.comb += [
                player.loaded.eq(control.loaded), control.played.eq(player.played),
                control.taken.eq(player.taken), player.idle.eq(control.idle), player.seed.eq(control.seed),
                player.line_rate.eq(control.line_rate),
                player.frames_in.eq(frames_in), player.frames_out.eq(frames_out), player.cycle.eq(self.cycle),
            ]
            valid, ready, fields = _handshake(port, kind)
            top_valid, top_ready, top_fields = _handshake(top, kind)
            with m.If(self.bypass):
                m.d.comb += [valid.eq(top_valid), top_ready.eq(ready)]
                m.d.comb += [fields[name].eq(top_fields[name]) for name in fields]
            with m.Else():
                m.d.comb += [valid.eq(player.o.valid), player.o.ready.eq(ready)]
                m.d.comb += [fields[name].eq(getattr(player.o.payload, name)) for name in fields]

        ports = zip(self.recorders, outputs, _ports(self, self.output_names), self.outputs, strict=True)
        for j, (recorder, port, top, (kind, _, _)) in enumerate(ports):
            m.submodules[f"recorder_{j}"] = recorder
            control = self.record[j]
            m.d.comb += [
                control.recorded.eq(recorder.recorded), recorder.consumed.eq(control.consumed),
                control.frames.eq(recorder.frames), control.pauses.eq(recorder.pauses),
                recorder.backpressure.eq(control.backpressure), recorder.seed.eq(control.seed),
                recorder.cycle.eq(self.cycle),
            ]
            valid, ready, fields = _handshake(port, kind)
            top_valid, top_ready, top_fields = _handshake(top, kind)
            m.d.comb += [top_fields[name].eq(signal) for name, signal in fields.items()]
            m.d.comb += [getattr(recorder.i.payload, name).eq(signal) for name, signal in fields.items()]
            with m.If(self.bypass):
                m.d.comb += [top_valid.eq(valid), ready.eq(top_ready)]
            with m.Else():
                m.d.comb += [recorder.i.valid.eq(valid), ready.eq(recorder.i.ready)]
        return m


def run_harnessed(dut, *, inputs, outputs, name, build_params, params=None, **kwargs):
    """``sim.runner.run_cocotb`` on ``dut`` inside a :class:`Harness` (module ``name``), the harness's
    description in the test's parameters as ``harness``. Every test of a device, clock by clock
    (``bypass``) or in bulk, shares this one build per parameter set."""
    from ..sim.runner import run_cocotb
    harness = Harness(dut, inputs=inputs, outputs=outputs)
    return run_cocotb(harness, name=name, build_params=build_params,
                      params={"harness": harness.description(), **(params or {})}, **kwargs)


def run_switch(switch, **kwargs):
    """tb/switch_tb.py on a ``NetReduceSwitch`` in its harness (see :func:`run_harnessed`)."""
    return run_harnessed(switch, inputs=["s_axis"], outputs=["m_axis"], name="switch_harness",
                         test_module="netreduce.tb.switch_tb", build_params=switch.parameters, **kwargs)


def run_roce_top(top, width, *, test_module="netreduce.tb.parser_tb", **kwargs):
    """A cocotb test module on ``ParserTop`` (``top`` "parser") or ``RocePipelineTop`` ("pipeline") of
    ``width`` bits in its harness (see :func:`run_harnessed`)."""
    from ..hw.top import ParserTop, RocePipelineTop
    component, outputs = {"parser": (ParserTop, ["m_axis", "m_hdr"]),
                          "pipeline": (RocePipelineTop, ["m_axis"])}[top]
    return run_harnessed(component(width), inputs=["s_axis"], outputs=outputs, name=f"{top}_harness",
                         test_module=test_module, build_params={"top": top, "width": width}, **kwargs)
