"""The free cells of a buffer in cells (the egress stage's, ``hw.egress``): given out from a register.

``FreeCells(cells, *, ready=4)``

* ``cell`` (Out): the cell the writer gets if it takes one in this clock; ``available`` (Out): there is one.
  Both come from registers only, so that the buffer's write address is never a block RAM's late output.
* ``take`` (In): the writer takes ``cell`` in this clock (only where ``available``).
* ``give`` and ``given`` (In): a cell comes back in this clock.

Cells never used come first, in order (0, 1, ... from a counter: a reset needs no initialised memory); then
the cells given back. A cell given back goes into one of ``ready`` registers behind ``cell`` (a circular
queue: a take moves its first pointer and nothing else) where one is free, else into a circular list in block
RAM, read into those registers as they empty (a read a clock, each read straight into a register: the RAM's
output is late in the clock). The rule the buffer relies on: **a cell given back in clock t can be taken
from t + 1, and cells can be taken one a clock** as long as the cells free at the start of each clock (never
used, given back before it, and not taken) number at least one. Why it holds: a cell goes into the list only
when the registers and the read under way hold ``ready`` cells between them; a read starts whenever they hold
fewer and the list has one, and lands two clocks after the decision (its address and the RAM's output
register), so against one take a clock the registers never run dry while the list has a cell (3 registers
would do; 4 make the queue's pointers wrap by themselves). ``tests/test_free_cells.py`` takes and gives at
random at every rate, and checks every take against the count of free cells.

The order in which cells given back are given out again is not kept (the buffer does not care which cell it
gets, only that it is free).
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from .ram import NO_COLLISION, BlockRAMReadPort, increment

__all__ = ["FreeCells"]


class FreeCells(wiring.Component):
    """``FreeCells(cells, *, ready=4)``: the module docstring."""

    def __init__(self, cells, *, ready=4):
        problem = None
        if not isinstance(cells, int) or cells < 2:
            problem = f"cells must be an integer of at least 2, not {cells!r}"
        elif not isinstance(ready, int) or ready < 4 or ready & (ready - 1):
            problem = f"ready must be a power of two of at least 4, not {ready!r}"
        if problem:
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise ValueError(problem)
        self.cells, self.ready = cells, ready
        bits = max(1, ceil_log2(cells))
        super().__init__({
            "take": In(1), "cell": Out(bits), "available": Out(1),
            "give": In(1), "given": In(bits),
        })

    def elaborate(self, platform):
        m = Module()
        cells, R = self.cells, self.ready
        bits = len(self.cell)

        # never used: 0, 1, ... until ``fresh`` reaches ``cells`` (``used_up``, a register of its own)
        fresh = Signal(range(cells + 1))
        used_up = Signal()
        take_fresh = self.take & ~used_up
        with m.If(take_fresh):
            m.d.sync += [fresh.eq(fresh + 1), used_up.eq(fresh == cells - 1)]

        # the list in block RAM: written at ``tail``, read at ``head``; ``listed`` cells not yet read
        m.submodules.list = cell_list = Memory(shape=bits, depth=cells, init=[], attrs=NO_COLLISION)
        list_w = cell_list.write_port()
        m.submodules.list_read = list_r = BlockRAMReadPort(cell_list)
        head = Signal(range(cells))
        tail = Signal(range(cells))
        listed = Signal(range(cells + 1))

        # the registers behind ``cell``, a circular queue: ``held`` of them from ``first``; ``reading``: a read's
        # word lands this clock. A take moves ``first`` only, so the late ``take`` reaches no register's data.
        slots = Array(Signal(bits, name=f"ready{n}") for n in range(R))
        first = Signal(range(R))
        held = Signal(range(R + 1))
        reading = Signal()

        take_held = self.take & used_up
        # decided from registers and ``give`` alone: where a given cell goes, whether a read starts (``give``
        # and ``take`` come late in the clock: each only chooses among values made from registers beside them)
        bound = Signal(range(R + 2))            # held by the end of this clock, before this clock's give and take
        m.d.comb += bound.eq(held + reading)
        to_registers = self.give & (bound < R)
        to_list = self.give & ~to_registers
        start_read = (listed != 0) & Mux(self.give, bound + 1 < R, bound < R)
        m.d.comb += [
            list_w.addr.eq(tail), list_w.data.eq(self.given), list_w.en.eq(to_list),
            list_r.addr.eq(head), list_r.en.eq(start_read),
        ]
        with m.If(to_list):
            m.d.sync += tail.eq(increment(tail, cells))
        with m.If(start_read):
            m.d.sync += head.eq(increment(head, cells))
        m.d.sync += [
            listed.eq(Mux(to_list, Mux(start_read, listed, listed + 1), Mux(start_read, listed - 1, listed))),
            reading.eq(start_read),
        ]
        # this clock's arrivals (the read's word, then the given cell) go in behind the cells held
        behind = (first + held)[:len(first)]
        with m.If(reading):
            m.d.sync += slots[behind].eq(list_r.data)
        with m.If(to_registers):
            m.d.sync += slots[(behind + reading)[:len(first)]].eq(self.given)
        with m.If(take_held):
            m.d.sync += first.eq(first + 1)
        m.d.sync += held.eq(Mux(take_held, Mux(to_registers, bound, bound - 1), Mux(to_registers, bound + 1, bound)))

        m.d.comb += [
            self.cell.eq(Mux(used_up, slots[first], fresh[:bits])),
            self.available.eq(~used_up | (held != 0)),
        ]
        return m
