"""Fault injection: seeded, by rate and by exact frame; corruption is always caught by the ICRC."""

import pytest

from netreduce.host.faults import FaultInjector, FaultSpec
from netreduce.host.icrc import icrc_ok
from netreduce.host.packets import build_roce_frame
from netreduce.host.protocol import ControlMessage, build_control_frame
from netreduce.wire import ControlType

FRAME = build_roce_frame(0x0A, bytes(range(64)), reth=(0x1000, 5, 64), psn=3)


def run(spec, frames, seed=0):
    injector = FaultInjector(spec, seed=seed, name="link")
    return [injector.apply(f) for f in frames], injector.counts


def test_no_faults_is_the_identity():
    out, counts = run(FaultSpec(), [FRAME] * 10)
    assert out == [[(0, FRAME)]] * 10 and not counts


def test_same_seed_same_faults_and_rates_roughly_kept():
    spec = FaultSpec(loss=0.1, duplicate=0.1, reorder=0.1)
    a, counts = run(spec, [FRAME] * 4000, seed=5)
    b, _ = run(spec, [FRAME] * 4000, seed=5)
    c, _ = run(spec, [FRAME] * 4000, seed=6)
    assert a == b and a != c
    # each kind is drawn independently, the first that hits wins: 10 %, 9 %, 8.1 %
    assert 340 < counts["loss"] < 460
    assert 300 < counts["duplicate"] < 420
    assert 260 < counts["reorder"] < 390
    assert sum(len(x) == 0 for x in a) == counts["loss"]
    assert sum(len(x) == 2 for x in a) == counts["duplicate"]
    assert sum(len(x) == 1 and x[0][0] == spec.reorder_delay_ns for x in a) == counts["reorder"]


def test_exact_frames():
    spec = FaultSpec(exact={1: "loss", 2: "duplicate", 3: "reorder"}, reorder_delay_ns=777,
                     duplicate_delay_ns=9)
    out, _ = run(spec, [FRAME] * 5)
    assert out == [[(0, FRAME)], [], [(0, FRAME), (9, FRAME)], [(777, FRAME)], [(0, FRAME)]]
    out, _ = run(FaultSpec(select=lambda i, f: "loss" if i % 2 else None), [FRAME] * 4)
    assert [len(x) for x in out] == [1, 0, 1, 0]


def test_corruption_is_caught_by_the_icrc_and_spares_other_frames():
    out, counts = run(FaultSpec(corrupt=1.0), [FRAME] * 300, seed=1)
    damaged = [x[0][1] for x in out]
    assert counts["corrupt"] == 300
    assert all(d != FRAME and len(d) == len(FRAME) and not icrc_ok(d) for d in damaged)
    control = build_control_frame(ControlMessage(ControlType.CREDIT, 1, 0, 3), src_mac=1, dst_mac=2,
                                  src_ip="10.0.0.1", dst_ip="10.0.0.2")
    assert run(FaultSpec(corrupt=1.0), [control])[0] == [[(0, control)]]


def test_bad_specs_are_rejected():
    with pytest.raises(ValueError, match="probability"):
        FaultSpec(loss=1.5)
    with pytest.raises(ValueError, match="unknown fault"):
        FaultSpec(exact={0: "explode"})
