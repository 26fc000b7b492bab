"""amaranth.sim unit test of hw/switch/records.py (``HeaderRecords``): each frame's header record held until its
fate, and applied in frame order.

Random header records go in with idle clocks and out to the match with backpressure; a fate for each, in the
same order, with fates of no frame among them, comes in on its own stream with idle clocks of its own, and
the records of the frames that go on are taken with backpressure. The queue is a few records deep here: with
the records ahead of their fates it fills and holds the parser back; with the fates ahead, each waits for its
record. With and without IPv6 (then the parser's records have no IPv6 address bits above the low 32 and no
flow label: the parser contract's rule 9). Checked against the module's contract:

- the match gets every record, unchanged, in order;
- the emitter gets the record of every ``FORWARD`` fate, in order, its PSN shifted back by ``GAP_PSN_SHIFT``
  (modulo 2^24) where the fate says ``gap``, and no other;
- each ``STORE`` fate writes its record's ``StoredHeader`` at its entry, and nothing else is written;
- ``stored`` strobes once for each fate with ``results``, never before that fate's record is written.
"""

import random

import pytest

from netreduce.hw.stream import ParsedHeader
from netreduce.hw.switch.emitter import StoredHeader, stored_header_fields
from netreduce.hw.switch.records import Fate, HeaderRecords
from netreduce.sim.amaranth_streams import collect_records, run, send_records
from netreduce.wire import GAP_PSN_SHIFT, PARSED_HEADER_FIELDS

ENTRIES, DEPTH = 48, 6


def random_record(rng, ipv6):
    record = {name: rng.getrandbits(bits) for name, bits in PARSED_HEADER_FIELDS}
    if not ipv6:
        record.update(ip_src=record["ip_src"] & 0xFFFF_FFFF, ip_dst=record["ip_dst"] & 0xFFFF_FFFF, ip_flow_label=0)
    return record


def scenario(rng, frames, ipv6):
    """Records and the fates: one for each record, in order, with fates of no frame (``NONE``) among them."""
    records = [random_record(rng, ipv6) for _ in range(frames)]
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


@pytest.mark.parametrize("records_idle, fates_idle, ipv6", [(0.1, 0.6, True), (0.6, 0.05, True), (0.1, 0.6, False)])
def test_each_record_goes_where_its_fate_says_in_frame_order(records_idle, fates_idle, ipv6):
    rng = random.Random(11)
    records, fates = scenario(rng, 120, ipv6)
    dut = HeaderRecords(store_entries=ENTRIES, ipv6=ipv6, depth=DEPTH)
    to_match, to_emitter, events, stalled, waited = [], [], [], [], []

    async def watch(ctx):
        """The store's writes and ``stored`` strobes, a write before a strobe of the same clock; and whether the
        parser was ever held back by a full queue (a record offered, not taken, the match ready), and whether a
        fate of a frame ever waited for its record."""
        async for _, _, en, addr, value, stored, i_valid, i_ready, o_ready, fate_valid, fate_ready, fate in \
                ctx.tick().sample(dut.store_write.en, dut.store_write.addr, dut.store_write.data, dut.stored,
                                  dut.i.valid, dut.i.ready, dut.o.ready, dut.fates.valid, dut.fates.ready,
                                  dut.fates.payload):
            if en:
                events.append(("write", int(addr), as_dict(value, StoredHeader)))
            if stored:
                events.append(("stored",))
            if i_valid and o_ready and not i_ready:
                stalled.append(True)
            if fate_valid and not fate_ready and fate.fate in (Fate.DROP, Fate.STORE):
                waited.append(True)

    want_headers, want_events = expected_events(records, fates)
    settled = []

    def done():
        """Everything out, and 20 more clocks in which nothing else may come."""
        if len(to_emitter) >= len(want_headers) and len(events) >= len(want_events) and len(to_match) >= len(records):
            settled.append(True)
        return len(settled) > 20
    run(dut, [send_records(dut.i, [ParsedHeader.const(r) for r in records], idle=records_idle, seed=1),
              send_records(dut.fates, [dut.Fate.const(f) for f in fates], idle=fates_idle, seed=2)],
        [collect_records(dut.o, to_match, backpressure=0.2, seed=3),
         collect_records(dut.headers, to_emitter, backpressure=0.4, seed=4), watch],
        until_idle=done, max_cycles=5_000)
    assert [as_dict(r, ParsedHeader) for r in to_match] == records
    assert [as_dict(r, ParsedHeader) for r in to_emitter] == want_headers
    assert events == want_events
    if records_idle < fates_idle:
        assert stalled, "the queue never filled: the scenario does not test that it holds the parser back"
    else:
        assert waited, "no fate waited for its record: the scenario does not test it"
