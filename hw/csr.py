"""The control-register port and its decoder, generated from the one register map (``netreduce.registers``).

``csr_signature()``: ``addr`` (a word address of ``ADDRESS_BITS``), ``wdata``, ``we``, and ``rdata``, which
shows the read-only register at the ``addr`` of ``READ_LATENCY`` clocks before (0 elsewhere; a read every
clock). A write takes effect a clock after the edge that samples it: each block of the map that has writable
registers takes the writes to its own addresses into registers of its own first (address, word, strobe), so
that no wire of the port's write data reaches every writable register of the switch (router2 put those
among the most congested nets of the board switch). The writable registers are not read back, so only the
configuration's records see that clock.

``decode_registers(m, csr, params, targets, readable, transforms=None, writes=None)`` writes ``targets`` and
returns the strobes of the ``action`` registers; ``writes`` gives a block's registered writes to components
that keep a copy of its registers in memories of their own (``block_write_layout``). The design names a
target for every writable register of every instance and a value for every read-only one; a register of
the map that the design does not name, or a name that is not in the map, is an error, so the map and the RTL
cannot drift apart.
"""

from amaranth.hdl import Const, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..registers import ADDRESS_BITS, BLOCKS, READ_LATENCY, WORD_BITS, check_map, instances

__all__ = ["csr_signature", "decode_registers", "block_write_layout"]


def csr_signature():
    """The control-register port as its master sees it."""
    return wiring.Signature({"addr": Out(ADDRESS_BITS), "wdata": Out(WORD_BITS), "we": Out(1),
                             "rdata": In(WORD_BITS)})


def block_write_layout(blk, count):
    """A write to a word of one of ``count`` instances of ``blk`` (a block whose ``stride`` is a power of two
    and whose base is aligned to ``stride`` times ``count`` rounded up to one): ``valid`` for the clock of the
    write, the instance ``index``, the word's ``offset`` in the instance and the ``word``."""
    stride_bits = exact_log2(blk.stride)
    if blk.base % (blk.stride << ceil_log2(count)):
        raise ValueError(f"block {blk.name}: its base {blk.base:#x} is not aligned to its instances")
    return data.StructLayout({"valid": 1, "index": max(1, ceil_log2(count)), "offset": stride_bits,
                              "word": WORD_BITS})


def decode_registers(m, csr, params, targets, readable, transforms=None, writes=None):
    """``targets``: ``{"block.register": [value of instance 0, ...]}`` for every ``wo`` and ``action``
    register; ``readable``: ``{"block.register": value}`` for every ``ro`` register of a block of one
    instance, ``[value of instance 0, ...]`` of a repeated block; ``transforms``: ``{"block.register":
    f(wdata) -> value}`` applied to a written word (a register of one word). Returns ``{"block.register":
    Signal(count)}``, each bit 1 in the clock an instance's ``action`` register is written. The ``readable``
    values are read ``READ_LATENCY - 2`` clocks after the address: a value chosen by ``csr.addr`` in its own
    component (the egress stage's counters) may take that many registered clocks. ``writes``: ``{"block":
    value of block_write_layout}``, driven with each write to that block's words, in the clock the block's
    registers take it (a write's transform is not applied to it)."""
    check_map(params)
    transforms = transforms or {}
    expected_targets, expected_readable = set(), set()
    for blk in BLOCKS:
        for r in blk.registers:
            (expected_readable if r.access == "ro" else expected_targets).add(f"{blk.name}.{r.name}")
    for given, expected, kind in ((targets, expected_targets, "writable"), (readable, expected_readable,
                                                                             "read-only")):
        if set(given) != expected:
            raise ValueError(f"the design and the register map disagree on the {kind} registers: "
                             f"{sorted(set(given) ^ expected)}")
    strobes = {}
    for blk in BLOCKS:
        count = instances(blk, params)
        writable = [r for r in blk.registers if r.access != "ro"]
        for r in writable:
            key = f"{blk.name}.{r.name}"
            if len(targets[key]) != count:
                raise ValueError(f"{key}: {len(targets[key])} targets for {count} instances")
            if r.access == "action":
                strobes[key] = Signal(count, name=f"wrote_{blk.name}_{r.name}")
        if not writable or not count:
            continue
        # the block's own copy of a write to one of its addresses (a clock later); the copies differ in
        # their enables, so synthesis keeps one a block
        end = blk.base + blk.stride * (count - 1) + max(r.offset + r.words for r in writable)
        we = Signal(name=f"write_{blk.name}")
        addr = Signal(ADDRESS_BITS, name=f"write_{blk.name}_addr", reset_less=True)
        wdata = Signal(WORD_BITS, name=f"write_{blk.name}_data", reset_less=True)
        here = csr.we & (csr.addr >= blk.base) & (csr.addr < end)
        m.d.sync += we.eq(here)
        with m.If(here):
            m.d.sync += [addr.eq(csr.addr), wdata.eq(csr.wdata)]
        if blk.name in (writes or {}):
            out = writes[blk.name]
            stride_bits = len(out.offset)
            m.d.comb += [out.valid.eq(we), out.offset.eq(addr[:stride_bits]),
                         out.index.eq(addr[stride_bits:stride_bits + len(out.index)]), out.word.eq(wdata)]
        # one If per written word rather than one Switch over every address: Amaranth puts the whole Switch,
        # empty cases and all, into each target's process (a Verilog text quadratic in the map's size)
        with m.If(we):
            for r in writable:
                key = f"{blk.name}.{r.name}"
                for index, value in enumerate(targets[key]):
                    value = Value.cast(value)
                    for word in range(r.words):
                        low = WORD_BITS * word
                        if low >= len(value):
                            break
                        with m.If(addr == blk.base + blk.stride * index + r.offset + word):
                            written = transforms[key](wdata) if key in transforms else wdata
                            m.d.sync += value[low:low + WORD_BITS].eq(written)
                            if r.access == "action":
                                m.d.comb += strobes[key][index].eq(1)
    # the read: a tree of 2:1 multiplexers over the address bits that tell the read-only words apart, and
    # whether the address is one of them (against a Switch over every address, Yosys 0.23 maps the
    # registers of a 4-worker board switch, alone, to 6,700 LUT4s instead of 11,800 on the ECP5; flattened
    # into the whole board top, the two come out alike)
    words = {}
    for blk in BLOCKS:
        count = instances(blk, params)
        for r in blk.registers:
            if r.access != "ro":
                continue
            key = f"{blk.name}.{r.name}"
            values = readable[key] if blk.count is not None else [readable[key]]
            if len(values) != count:
                raise ValueError(f"{key}: {len(values)} values for {count} instances")
            for index, value in enumerate(values):
                words[blk.base + blk.stride * index + r.offset] = (Value.cast(value), Const(1))
    # The tree takes two registered clocks: the words that agree on the address bits from ``split`` up are
    # chosen among by the lower bits READ_LATENCY - 2 clocks after the address (a ``readable`` value may be
    # that many clocks behind it, registered in its component), and those choices by the upper bits a clock
    # later. ``split`` halves the bits that tell the words apart.
    varying = [bit for bit in range(ADDRESS_BITS) if len({a >> bit & 1 for a in words}) > 1]
    split = varying[len(varying) // 2] if varying else 0
    addresses = [csr.addr]          # the address a clock after another
    for stage in range(READ_LATENCY - 1):
        addresses.append(Signal(ADDRESS_BITS, name=f"read_address_{stage + 1}"))
        m.d.sync += addresses[-1].eq(addresses[-2])
    early, address = addresses[READ_LATENCY - 2], addresses[READ_LATENCY - 1]
    groups = {}
    for at, word in words.items():
        groups.setdefault(at >> split, {})[at] = word
    chosen = {}
    for group, members in groups.items():
        value, hit = _read_tree(early, members, split - 1)
        value_reg = Signal(len(value), name=f"read_group_{group:x}")
        hit_reg = Signal(name=f"read_group_{group:x}_hit")
        m.d.sync += [value_reg.eq(value), hit_reg.eq(hit)]
        chosen[group << split] = (value_reg, hit_reg)
    value, hit = _read_tree(address, chosen, ADDRESS_BITS - 1, stop=split)
    m.d.sync += csr.rdata.eq(Mux(hit, value, 0))
    return strobes


def _read_tree(addr, words, bit, stop=0):
    """``(value, hit)``: the value of ``words`` (``{address: (value, hit)}``) at ``addr``, and whether ``addr``
    is one of their addresses (and the word's own ``hit``), deciding on ``addr``'s bits from ``bit`` down to
    ``stop`` (the words agree on the bits below it). A bit on which every address agrees only narrows
    ``hit``; a bit that tells addresses apart is a multiplexer."""
    if bit < stop:
        (word,) = words.values()
        return word
    ones = {a: v for a, v in words.items() if a >> bit & 1}
    zeros = {a: v for a, v in words.items() if not a >> bit & 1}
    if not zeros or not ones:
        value, hit = _read_tree(addr, ones or zeros, bit - 1, stop)
        return value, hit & (addr[bit] if ones else ~addr[bit])
    value_1, hit_1 = _read_tree(addr, ones, bit - 1, stop)
    value_0, hit_0 = _read_tree(addr, zeros, bit - 1, stop)
    return Mux(addr[bit], value_1, value_0), Mux(addr[bit], hit_1, hit_0)
