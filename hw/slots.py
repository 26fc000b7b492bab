"""The aggregation memory of the NetReduce switch: contribution banks, the sum engine, the results.

``SlotMemory(*, width=64, workers=8, slots=16, packet_beats=16, fmt="fp32", ftz=False, write_ports=1,
read_ports=1, adder_stages=5)``

Storage (every memory is an :class:`amaranth.lib.memory.Memory`, no reset, initial contents zero):

* **Contribution banks**: one bank per worker ``w``, ``slots * packet_beats`` words of ``width`` bits;
  the word of (packet slot ``slot``, beat ``beat``) is at ``slot * packet_beats + beat``.
* **Result memory**: ``2 * slots`` packet entries of ``packet_beats`` words, the word of (``result_slot``,
  ``beat``) at ``result_slot * packet_beats + beat``. ``result_slot`` has one more bit than ``slot``:
  the switch double-buffers the results of each packet slot, so that a late duplicate answered from the
  older sum never reads a newer one. One write port (the sum engine) and ``read_ports`` read ports.

Members (field widths: ``worker`` ceil_log2(workers), ``slot`` ceil_log2(slots), ``beat``
ceil_log2(packet_beats), each at least 1 bit; ``result_slot`` one bit more than ``slot``; ``beats``
bits_for(packet_beats)):

* ``write[p]``, ``p < write_ports``: In ``valid``, ``worker``, ``slot``, ``beat``, ``data`` (``width``).
  No ready: a write is taken in the clock it is valid. Bank ``w`` writes, in each clock, the
  lowest-numbered port that is valid with ``worker == w``.
* ``sum_request``: ``In(stream.Signature(StructLayout({"slot", "result_slot", "beats", "mask":
  workers})))``: sum the first ``beats`` words of packet slot ``slot`` over the workers whose ``mask``
  bit is set, element lane by element lane, into result entry ``result_slot``.
* ``sum_done``: ``Out(stream.Signature(StructLayout({"result_slot"})))``: one per request, in request
  order, valid from the clock after the last result word of the request was written.
* ``read[r]``, ``r < read_ports``: In ``en``, ``result_slot``, ``beat``; Out ``data`` (``width``):
  the word of the address presented with ``en`` appears on ``data`` the next clock and stays there until
  the next ``en``.

The sum: element lane ``l`` of a word is its bits ``[l*ew, (l+1)*ew)`` (``ew`` the element width: the
little-endian elements of the payload bytes). Each lane is the deterministic tree sum
(``netreduce.sim.fp.tree_sum(fmt, contributions, mask, ftz)``) of one
:class:`~netreduce.hw.fp.AdderTree` ``(fmt, width=width, n_inputs=workers, adder_stages=adder_stages,
ftz=ftz, backpressure=False)`` with its default leaf and root stages; a mask of 0 gives +0.

Timing:

* The engine reads one word of every bank per clock (all banks at one address), back to back across
  requests: ``sum_request.ready`` is high in the clock in which the previous request issues its last
  read, so a stream of requests of ``b_0, b_1, ...`` beats runs at one beat per clock without bubbles.
  A request taken in clock ``t`` reads its beats in clocks ``t+1 .. t+beats``; its ``sum_done`` is valid
  from clock ``t + latency + beats - 1``.
* ``latency`` (attribute) = ``tree.latency + 4`` clocks from the request handshake to its ``sum_done``
  for a one-beat request: the address register, the bank read, the bank data register (each bank's read
  goes straight into a register: a block RAM's output comes late in the clock, and the tree's first logic
  is then a clock away from it), the tree, and the done count. For the defaults (8 workers, 5 adder
  stages) it is 1 + 3*5 + 1 + 4 = 21.
* Flow control: every request takes a done token from the handshake until its ``sum_done`` is taken;
  ``done_depth = latency + 1`` tokens, which is enough for one-beat requests at full rate while
  ``sum_done`` is always ready. ``sum_request.ready`` drops when every token is taken, so a consumer that
  holds ``sum_done.ready`` low loses nothing; the tree itself never stalls.

Rules for the switch (not checked by the hardware):

* Two write ports never write the same worker's bank in one clock (the lower-numbered one would win and
  the other's word would be lost).
* Every contribution word of a request is written at the latest in the clock of the request's handshake
  (bank reads are not transparent to the bank writes; the first read is in the next clock).
* ``slot < slots``, ``result_slot < 2 * slots``, ``beat < packet_beats``, ``worker < workers``;
  ``beats`` from 1 to ``packet_beats`` (0 is taken as 1 and more than ``packet_beats`` as
  ``packet_beats``, so that each request still gives exactly one ``sum_done``).
* A result entry is not read while a request that writes it is in flight; a read in the clock in which
  the engine writes the same word returns the old word (the read ports are not transparent). Reading
  from the ``sum_done`` handshake on always returns the new sum.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from .fp.adder import MAX_ADDER_STAGES, check_format, check_int, check_lane_width
from .fp.pipeline import Pipeline
from .fp.tree import MAX_INPUTS, AdderTree

__all__ = ["SlotMemory", "MAX_SLOTS", "MAX_PACKET_BEATS", "MAX_PORTS", "result_read_signature", "slot_write_signature",
           "sum_request_layout", "sum_done_layout"]

MAX_SLOTS = 1 << 16
MAX_PACKET_BEATS = 1 << 12
MAX_PORTS = 64


def _field_bits(count):
    """Bits of an index below ``count``, at least 1."""
    return max(1, ceil_log2(count))


def result_read_signature(width, slots, packet_beats):
    """A read port of the results (``read[r]``), as its reader sees it."""
    return wiring.Signature({
        "en": Out(1),
        "result_slot": Out(_field_bits(slots) + 1),
        "beat": Out(_field_bits(packet_beats)),
        "data": In(width),
    })


def slot_write_signature(width, workers, slots, packet_beats):
    """A write port of the banks (``write[w]``), as its writer sees it."""
    return wiring.Signature({
        "valid": Out(1),
        "worker": Out(_field_bits(workers)),
        "slot": Out(_field_bits(slots)),
        "beat": Out(_field_bits(packet_beats)),
        "data": Out(width),
    })


def sum_request_layout(workers, slots, packet_beats):
    """The payload of ``sum_request``."""
    return data.StructLayout({
        "slot": _field_bits(slots),
        "result_slot": _field_bits(slots) + 1,
        "beats": bits_for(packet_beats),
        "mask": workers,
    })


def sum_done_layout(slots):
    """The payload of ``sum_done``: the result slot of the finished sum."""
    return data.StructLayout({"result_slot": _field_bits(slots) + 1})


class SlotMemory(wiring.Component):
    """Contribution banks, sum engine and result memory of the NetReduce switch (see the module
    documentation for the interface, the timing and the rules).

    Attributes
    ----------
    latency : clocks from a one-beat request's handshake to its ``sum_done``
    done_depth : requests that may be in flight or waiting on ``sum_done``
    lanes : element lanes per word
    tree : the :class:`~netreduce.hw.fp.AdderTree`
    worker_bits, slot_bits, result_slot_bits, beat_bits, beats_bits : field widths
    """

    def __init__(self, *, width=64, workers=8, slots=16, packet_beats=16, fmt="fp32", ftz=False,
                 write_ports=1, read_ports=1, adder_stages=5):
        try:
            self.fmt = check_format(fmt)
            self.width = check_lane_width(self.fmt, width)
            self.workers = check_int(workers, "workers", 1, MAX_INPUTS)
            self.slots = check_int(slots, "slots", 1, MAX_SLOTS)
            self.packet_beats = check_int(packet_beats, "packet_beats", 1, MAX_PACKET_BEATS)
            self.write_ports = check_int(write_ports, "write_ports", 1, MAX_PORTS)
            self.read_ports = check_int(read_ports, "read_ports", 1, MAX_PORTS)
            self.adder_stages = check_int(adder_stages, "adder_stages", 0, MAX_ADDER_STAGES)
        except ValueError:
            self._MustUse__silence = True       # a rejected component is not an unused one
            raise
        self.ftz = bool(ftz)

        self.worker_bits = _field_bits(workers)
        self.slot_bits = _field_bits(slots)
        self.result_slot_bits = self.slot_bits + 1
        self.beat_bits = _field_bits(packet_beats)
        self.beats_bits = bits_for(packet_beats)
        self.bank_depth = slots * packet_beats
        self.result_depth = 2 * slots * packet_beats
        self.bank_addr_bits = ceil_log2(self.bank_depth)
        self.result_addr_bits = ceil_log2(self.result_depth)

        self.tree = AdderTree(self.fmt, width=width, n_inputs=workers, adder_stages=adder_stages,
                              ftz=self.ftz, backpressure=False, user_width=self.result_addr_bits + 1)
        self.tree._MustUse__silence = True     # elaborated with this component, which warns if unused
        self.lanes = self.tree.lanes
        self.latency = self.tree.latency + 4
        self.done_depth = self.latency + 1

        write_signature = slot_write_signature(width, workers, slots, packet_beats)
        read_signature = result_read_signature(width, slots, packet_beats)
        request_layout = sum_request_layout(workers, slots, packet_beats)
        done_layout = sum_done_layout(slots)
        super().__init__({
            "write": In(write_signature).array(write_ports),
            "sum_request": In(stream.Signature(request_layout)),
            "sum_done": Out(stream.Signature(done_layout)),
            "read": In(read_signature).array(read_ports),
        })

    def _bank_address(self, slot, beat):
        return (slot * self.packet_beats + beat)[:self.bank_addr_bits]

    def _result_address(self, result_slot, beat):
        return (result_slot * self.packet_beats + beat)[:self.result_addr_bits]

    def elaborate(self, platform):
        m = Module()
        pb = self.packet_beats

        # -- contribution banks: write side ------------------------------------------------------------
        write_addresses = []
        for p, port in enumerate(self.write):
            address = Signal(self.bank_addr_bits, name=f"write{p}_address")
            m.d.comb += address.eq(self._bank_address(port.slot, port.beat))
            write_addresses.append(address)

        bank_reads = []
        for w in range(self.workers):
            bank = Memory(shape=self.width, depth=self.bank_depth, init=[])
            m.submodules[f"bank{w}"] = bank
            bank_write = bank.write_port()
            with m.If(self.write[0].valid & (self.write[0].worker == w)):
                m.d.comb += [
                    bank_write.en.eq(1),
                    bank_write.addr.eq(write_addresses[0]),
                    bank_write.data.eq(self.write[0].data),
                ]
            for p in range(1, self.write_ports):
                with m.Elif(self.write[p].valid & (self.write[p].worker == w)):
                    m.d.comb += [
                        bank_write.en.eq(1),
                        bank_write.addr.eq(write_addresses[p]),
                        bank_write.data.eq(self.write[p].data),
                    ]
            bank_reads.append(bank.read_port(domain="sync"))

        # -- sum engine: one read of every bank per clock -------------------------------------------------
        request = self.sum_request.payload
        done_tokens = m.submodules.done_tokens = SyncFIFO(width=self.result_slot_bits, depth=self.done_depth)
        completed = Signal(range(self.done_depth + 1))       # done tokens whose sums are all written

        busy = Signal()                                             # a read is issued this clock
        read_address = Signal(self.bank_addr_bits, reset_less=True)
        result_address = Signal(self.result_addr_bits, reset_less=True)
        beats_left = Signal(self.beats_bits, reset_less=True)       # including this clock's read
        mask = Signal(self.workers, reset_less=True)
        last_read = Signal()
        m.d.comb += last_read.eq(busy & (beats_left <= 1))

        engine_free = Signal()
        m.d.comb += [
            engine_free.eq(~busy | last_read),
            self.sum_request.ready.eq(engine_free & done_tokens.w_rdy),
            done_tokens.w_en.eq(self.sum_request.valid & self.sum_request.ready),
            done_tokens.w_data.eq(request.result_slot),
        ]
        request_beats = Signal(self.beats_bits)         # 0 needs no care: beats_left <= 1 is the last read
        if (1 << self.beats_bits) - 1 > pb:
            m.d.comb += request_beats.eq(Mux(request.beats > pb, pb, request.beats))
        else:
            m.d.comb += request_beats.eq(request.beats)

        with m.If(self.sum_request.valid & self.sum_request.ready):
            m.d.sync += [
                busy.eq(1),
                read_address.eq(self._bank_address(request.slot, 0)),
                result_address.eq(self._result_address(request.result_slot, 0)),
                beats_left.eq(request_beats),
                mask.eq(request.mask),
            ]
        with m.Elif(busy):
            m.d.sync += [
                read_address.eq(read_address + 1),
                result_address.eq(result_address + 1),
                beats_left.eq(beats_left - 1),
            ]
            with m.If(last_read):
                m.d.sync += busy.eq(0)

        for bank_read in bank_reads:
            m.d.comb += [bank_read.en.eq(busy), bank_read.addr.eq(read_address)]

        # the clock of the bank data, then its register: into the tree, with what travels along (two clocks)
        pipe = Pipeline(m)
        tree_valid = pipe.delay(busy, 2, "read_valid", reset_less=False)
        tree_mask = pipe.delay(mask, 2, "read_mask")
        tree_user = pipe.delay(Cat(result_address, last_read), 2, "read_user")
        bank_data = [pipe.reg(bank_read.data, f"bank{w}_data") for w, bank_read in enumerate(bank_reads)]

        tree = m.submodules.tree = self.tree
        m.d.comb += [
            tree.i.valid.eq(tree_valid),
            tree.i.payload.mask.eq(tree_mask),
            tree.i.payload.user.eq(tree_user),
            tree.o.ready.eq(1),
        ]
        for w, data_register in enumerate(bank_data):
            m.d.comb += tree.i.payload.data[w].eq(data_register)

        # -- result memory ------------------------------------------------------------------------------
        results = Memory(shape=self.width, depth=self.result_depth, init=[])
        m.submodules.results = results
        result_write = results.write_port()
        sum_address = Signal(self.result_addr_bits)
        sum_last = Signal()
        m.d.comb += [
            Cat(sum_address, sum_last).eq(tree.o.payload.user),
            result_write.en.eq(tree.o.valid),
            result_write.addr.eq(sum_address),
            result_write.data.eq(tree.o.payload.data),
        ]

        for r, port in enumerate(self.read):
            result_read = results.read_port(domain="sync")
            read_port_address = Signal(self.result_addr_bits, name=f"read{r}_address")
            m.d.comb += [
                read_port_address.eq(self._result_address(port.result_slot, port.beat)),
                result_read.en.eq(port.en),
                result_read.addr.eq(read_port_address),
                port.data.eq(result_read.data),
            ]

        # -- done tokens: a request's token waits in the FIFO until its last sum word is written -----------
        sum_written = Signal()
        m.d.comb += [
            sum_written.eq(tree.o.valid & sum_last),
            self.sum_done.valid.eq(completed != 0),
            self.sum_done.payload.result_slot.eq(done_tokens.r_data),
            done_tokens.r_en.eq(self.sum_done.valid & self.sum_done.ready),
        ]
        with m.If(sum_written & ~done_tokens.r_en):
            m.d.sync += completed.eq(completed + 1)
        with m.Elif(~sum_written & done_tokens.r_en):
            m.d.sync += completed.eq(completed - 1)
        return m
