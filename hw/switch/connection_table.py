"""Some of the connections' registers, kept again by a component that reads them one connection at a time
(``ConnectionTable``).

The connection match compares each header with every connection at once, so the configuration is held in
registers (``SwitchRegisters.connections``). The emitter needs one connection's fields at a time: the
addresses a result's header is restored with, the requester a CREDIT frame goes to. Read from those
registers, every connection's fields would run to it through a multiplexer over the connections, and on
the board switch the configuration's nets were router2's most congested. A ``ConnectionTable`` keeps a
copy of the fields it is built with, one memory per register word, each read without a clock at the
connection its reader names, and written with the register port's writes to the connection block
(``SwitchRegisters.connection_write``, a clock after ``csr.we``, in the clock the registers take them): only
that write (an index, an offset and a word) reaches the reader. The copy is the registers', word for word,
at every clock. With ``read_ahead`` the reader names the connection a clock before it reads its fields (a
synchronous read, transparent to that clock's write), so that its path starts at the read's register.

For an IPv4 address among them (``sums``), the table also keeps the ones' complement sum of its two 16-bit
words, folded to 16 bits as the word is written (``ones_complement_halves``), so that a reader that puts the
address into an IPv4 header checksum adds 16 bits instead of 32 in the clock that builds the header.
"""

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...registers import CONNECTION, WORD_BITS
from ..csr import block_write_layout
from ..deparser import ones_complement_fold

__all__ = ["ConnectionTable", "ones_complement_halves"]


def ones_complement_halves(word):
    """The ones' complement sum of a 32-bit ``word``'s two 16-bit halves, 16 bits: their sum with its carry
    added back once (the sum is at most 0x1FFFE, so the carry's addition carries no further)."""
    word = Value.cast(word)
    return ones_complement_fold(word[16:32] + word[:16])[:16]


class ConnectionTable(wiring.Component):
    """``ConnectionTable(*, connections, registers, sums=(), read_ahead=False)``: the connection block's
    ``registers`` (their names, writable ones) of each of ``connections`` connections. ``write``: the register
    port's writes to the block (``SwitchRegisters.connection_write``); ``entry`` (a field per register, by name)
    is that of connection ``conn``, in the same clock (with ``read_ahead``: of the ``conn`` of the clock
    before, as the registers hold it now), with a field ``NAME_sum`` for each of ``sums`` (registers of the
    table of one 32-bit word: ``ones_complement_halves`` of it)."""

    def __init__(self, *, connections, registers, sums=(), read_ahead=False):
        self.connections_count = connections
        self.read_ahead = read_ahead
        self.registers = tuple(CONNECTION.register(name) for name in registers)
        if any(r.access == "ro" for r in self.registers):
            raise ValueError("a connection table keeps writable registers only")
        self.sums = tuple(CONNECTION.register(name) for name in sums)
        if any(r not in self.registers or r.bits != WORD_BITS for r in self.sums):
            raise ValueError(f"sums are of the table's registers of {WORD_BITS} bits, not {sums!r}")
        self.Entry = data.StructLayout({**{r.name: r.bits for r in self.registers},
                                        **{f"{r.name}_sum": 16 for r in self.sums}})
        super().__init__({
            "write": In(block_write_layout(CONNECTION, connections)),
            "conn": In(max(1, ceil_log2(connections))),
            "entry": Out(self.Entry),
        })

    def elaborate(self, platform):
        m = Module()
        C, write = self.connections_count, self.write
        for r in self.registers:
            for word in range(r.words):
                low = WORD_BITS * word
                bits = min(WORD_BITS, r.bits - low)
                m.submodules[f"{r.name}_{word}"] = memory = Memory(shape=bits, depth=C, init=[])
                port = memory.write_port()
                m.d.comb += [port.en.eq(write.valid & (write.offset == r.offset + word)),
                             port.addr.eq(write.index), port.data.eq(write.word[:bits])]
                m.d.comb += self.entry[r.name][low:low + bits].eq(self._read(m, memory, port))
        for r in self.sums:
            m.submodules[f"{r.name}_sum"] = memory = Memory(shape=16, depth=C, init=[])
            port = memory.write_port()
            m.d.comb += [port.en.eq(write.valid & (write.offset == r.offset)),
                         port.addr.eq(write.index), port.data.eq(ones_complement_halves(write.word))]
            m.d.comb += self.entry[f"{r.name}_sum"].eq(self._read(m, memory, port))
        return m

    def _read(self, m, memory, write_port):
        """``memory``'s word at ``conn``: now, or with ``read_ahead`` registered (showing ``write_port``'s
        write of the same clock)."""
        port = memory.read_port(domain="comb")
        m.d.comb += port.addr.eq(self.conn)
        if not self.read_ahead:
            return port.data
        # (the register written here, not by the read port: a port's own register, transparent, is built by
        # Yosys as a register of the address in front of the distributed RAM's read)
        data = Signal.like(port.data, name="read_ahead")
        written = write_port.en & (write_port.addr == self.conn)
        m.d.sync += data.eq(Mux(written, write_port.data, port.data))
        return data
