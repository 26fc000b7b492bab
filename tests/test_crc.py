"""amaranth.sim unit tests of the CRC-32 update, the ICRC rewind and the IPv4 checksum, against zlib
and the host library (independent references)."""

import random
import zlib

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from netreduce.host.icrc import ipv4_checksum as reference_checksum
from netreduce.hw.crc import RAW_RESIDUE, apply_taps, crc_update, residue_after, rewind_taps
from netreduce.hw.deparser import ipv4_checksum


def evaluate(build, inputs):
    """Evaluate a combinational function: ``build(m, *signals) -> Value`` over a list of input tuples."""
    m = Module()
    widths = [width for width, _ in inputs[0]]
    signals = [Signal(width) for width in widths]
    out = Signal(64)
    m.d.comb += out.eq(build(m, *signals))
    results = []

    async def bench(ctx):
        for values in inputs:
            for signal, (_, value) in zip(signals, values, strict=True):
                ctx.set(signal, value)
            results.append(ctx.get(out))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("nbytes", [1, 8, 64])
def test_crc_update_matches_zlib(nbytes):
    rng = random.Random(nbytes)
    cases = [(rng.getrandbits(32), rng.randbytes(nbytes)) for _ in range(50)]
    inputs = [[(32, state), (8 * nbytes, int.from_bytes(data, "little"))] for state, data in cases]
    got = evaluate(lambda m, state, data: crc_update(m, state, data, nbytes), inputs)
    for (state, data), value in zip(cases, got, strict=True):
        # zlib's crc32(data, crc) runs the register from ~crc and returns the register inverted
        assert value == zlib.crc32(data, state ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def test_icrc_residue_and_rewind():
    rng = random.Random(5)
    for _ in range(20):
        message = rng.randbytes(rng.randrange(1, 200))
        stored = zlib.crc32(message).to_bytes(4, "little")      # the ICRC as it sits on the wire
        register = zlib.crc32(message + stored) ^ 0xFFFFFFFF
        assert register == RAW_RESIDUE
        zeros = rng.randrange(64)
        assert zlib.crc32(message + stored + bytes(zeros)) ^ 0xFFFFFFFF == residue_after(zeros)
    # the RTL rewind undoes zero bytes: from the register after message + zeros back to the message's
    cases = []
    for zeros in (1, 2, 4, 8, 16, 32, 64):
        message = rng.randbytes(40)
        before = zlib.crc32(message) ^ 0xFFFFFFFF
        after = zlib.crc32(message + bytes(zeros)) ^ 0xFFFFFFFF
        cases.append((zeros, before, after))
    for zeros, before, after in cases:
        # evaluate() calls the lambda before the loop moves on, so it sees this iteration's ``zeros``
        (got,) = evaluate(lambda m, state: apply_taps(rewind_taps(zeros), state), [[(32, after)]])  # noqa: B023
        assert got == before


def test_ipv4_checksum_matches_host_library():
    rng = random.Random(9)
    headers = [bytearray(rng.randbytes(20)) for _ in range(40)] + [bytearray(20), bytearray(b"\xff" * 20)]
    for header in headers:
        header[10:12] = b"\x00\x00"
    inputs = [[(160, int.from_bytes(bytes(header), "little"))] for header in headers]

    def build(m, word):
        return ipv4_checksum([word[8 * i:8 * (i + 1)] for i in range(20)])
    for header, value in zip(headers, evaluate(build, inputs), strict=True):
        assert value == reference_checksum(bytes(header))
