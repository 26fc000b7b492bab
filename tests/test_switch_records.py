"""amaranth.sim unit test of hw/switch/records.py (``HeaderRecords``): each frame's fate applied to its header
record, in frame order.

Random header records come in as the parser's header FIFO offers them, with idle clocks; a fate for each, in
the same order, with fates of no frame among them, comes in on its own stream with idle clocks of its own,
and the records of the frames that go on are taken with backpressure. With the records ahead of their fates,
each record waits for its fate; with the fates ahead, each fate waits for its record. Checked against the
module's contract:

- the emitter gets the record of every ``FORWARD`` fate, in order, its PSN shifted back by ``GAP_PSN_SHIFT``
  (modulo 2^24) where the fate says ``gap``, and no other;
- each ``STORE`` fate writes its record's ``StoredHeader`` at its entry, and nothing else is written;
- ``stored`` strobes once for each fate with ``results``, never before that fate's record is written;
- a record is taken only by a fate of a frame (each record once), and every record is taken.
"""

import random

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from netreduce.hw.stream import ParsedHeader
from netreduce.hw.switch.emitter import StoredHeader, stored_header_fields
from netreduce.hw.switch.records import Fate, HeaderRecords
from netreduce.sim.amaranth_streams import collect_records, run, send_records
from netreduce.wire import GAP_PSN_SHIFT, PARSED_HEADER_FIELDS

ENTRIES = 48


def scenario(rng, frames):
    """Records and the fates: one for each record, in order, with fates of no frame (``NONE``) among them."""
    records = [{name: rng.getrandbits(bits) for name, bits in PARSED_HEADER_FIELDS} for _ in range(frames)]
    fates = []
    for _ in records:
        while rng.random() < 0.15:
            fates.append({"fate": Fate.NONE, "gap": 0, "entry": 0, "results": 1})
        fate = rng.choice([Fate.DROP, Fate.FORWARD, Fate.STORE])
        fates.append({"fate": fate, "gap": rng.getrandbits(1) if fate == Fate.FORWARD else 0,
                      "entry": rng.randrange(ENTRIES), "results": rng.getrandbits(1) if fate == Fate.STORE else 0})
    return records, fates


def expected_events(records, fates):
    """The headers to the emitter, and the store's writes and ``stored`` strobes in their order."""
    headers, events, taken = [], [], iter(records)
    for fate in fates:
        record = None if fate["fate"] == Fate.NONE else next(taken)
        if fate["fate"] == Fate.FORWARD:
            psn = (record["bth_psn"] + GAP_PSN_SHIFT) % (1 << 24) if fate["gap"] else record["bth_psn"]
            headers.append({**record, "bth_psn": psn})
        if fate["fate"] == Fate.STORE:
            events.append(("write", fate["entry"], stored_header_fields(record)))
        if fate["results"]:
            events.append(("stored",))
    return headers, events


def as_dict(view, layout):
    return {name: int(getattr(view, name)) for name in layout.members}


def clocked(dut):
    """A simulator of ``dut`` (which has no state of its own) with the clock the testbenches tick by."""
    m = Module()
    m.submodules.dut = dut
    m.domains.sync = ClockDomain()
    sim = Simulator(m)
    sim.add_clock(1e-8)
    return sim


@pytest.mark.parametrize("records_idle, fates_idle", [(0.1, 0.6), (0.6, 0.05)])
def test_each_record_goes_where_its_fate_says_in_frame_order(records_idle, fates_idle):
    rng = random.Random(11)
    records, fates = scenario(rng, 120)
    dut = HeaderRecords(store_entries=ENTRIES)
    to_emitter, events, taken, record_waited, fate_waited = [], [], [], [], []

    async def watch(ctx):
        """The store's writes and ``stored`` strobes, a write before a strobe of the same clock; the records
        taken; and whether a record ever waited for its fate, and a fate of a frame for its record."""
        async for _, _, en, addr, value, stored, r_valid, r_ready, record, fate_valid, fate_ready, fate in \
                ctx.tick().sample(dut.store_write.en, dut.store_write.addr, dut.store_write.data, dut.stored,
                                  dut.records.valid, dut.records.ready, dut.records.payload, dut.fates.valid,
                                  dut.fates.ready, dut.fates.payload):
            if en:
                events.append(("write", int(addr), as_dict(value, StoredHeader)))
            if stored:
                events.append(("stored",))
            if r_valid and r_ready:
                taken.append(as_dict(record, ParsedHeader))
            if r_valid and not fate_valid:
                record_waited.append(True)
            if fate_valid and not fate_ready and fate.fate in (Fate.DROP, Fate.STORE) and not r_valid:
                fate_waited.append(True)

    want_headers, want_events = expected_events(records, fates)
    settled = []

    def done():
        """Everything out, and 20 more clocks in which nothing else may come."""
        if len(to_emitter) >= len(want_headers) and len(events) >= len(want_events) and len(taken) >= len(records):
            settled.append(True)
        return len(settled) > 20
    run(dut, [send_records(dut.records, [ParsedHeader.const(r) for r in records], idle=records_idle, seed=1),
              send_records(dut.fates, [dut.Fate.const(f) for f in fates], idle=fates_idle, seed=2)],
        [collect_records(dut.headers, to_emitter, backpressure=0.4, seed=4), watch],
        until_idle=done, max_cycles=5_000, sim=clocked(dut))
    assert [as_dict(r, ParsedHeader) for r in to_emitter] == want_headers
    assert events == want_events
    assert taken == records
    if records_idle < fates_idle:
        assert record_waited, "no record waited for its fate: the scenario does not test it"
    else:
        assert fate_waited, "no fate waited for its record: the scenario does not test it"
