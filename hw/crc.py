"""CRC-32 (IEEE 802.3) at any datapath width, and the RoCE v2 ICRC field masks.

The CRC register update is linear over GF(2) in (state, data), so the XOR network of a W-byte update is
derived from the reference byte-serial CRC (``zlib.crc32``) by feeding it unit vectors: nothing is
hand-written from a polynomial. Conventions used throughout:

- The *raw* state is the CRC register without the initial and final inversion: ``raw_update(s, d)``.
  The standard CRC of ``M`` (initial value and final XOR all ones) equals ``~raw_update(0, M')`` where
  ``M'`` is ``M`` with its first four bytes inverted. Leading zero bytes leave a zero raw state at zero,
  so a unit may start its state at 0 at the first byte of the frame, zero everything before the ICRC
  region and invert the first four bytes of it.
- The ICRC is stored least significant byte first, like the Ethernet FCS, so the raw state after the
  region *and* its ICRC is the constant :data:`RAW_RESIDUE` exactly when the ICRC is right, and after
  ``z`` further zero bytes it is ``advance(RAW_RESIDUE, z)``: the parser checks the ICRC by comparing the
  state with a per-lane constant, with no need to find the ICRC bytes.
- ``advance`` by ``z`` zero bytes is an invertible linear map; the deparser *rewinds* the state over the
  zero bytes that follow the region in its last beat to find the ICRC it must append.
"""

import zlib
from functools import cache

from amaranth.hdl import Cat, Const, Signal, Value

from ..wire import BTH, IPV4_HEADER, IPV6_HEADER, UDP_HEADER, field_offsets

__all__ = ["raw_update", "advance", "RAW_RESIDUE", "update_taps", "crc_update", "rewind_taps",
           "apply_taps", "residue_after", "icrc_field_masks", "icrc_beat_masks", "ICRC_MASK_LAYOUTS"]


def raw_update(state, data):
    """The CRC-32 register after ``data`` from raw ``state`` (no initial or final inversion)."""
    return zlib.crc32(bytes(data), state ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def advance(state, nbytes):
    return raw_update(state, bytes(nbytes))


# zlib.crc32(M + crc(M) as little-endian bytes) == 0x2144DF1C for every M; as a raw state:
RAW_RESIDUE = 0x2144DF1C ^ 0xFFFFFFFF


@cache
def update_taps(nbytes):
    """For each of the 32 next-state bits, the bit mask over ``Cat(state[32], data[8 * nbytes])``."""
    taps = [0] * 32
    for j in range(32 + 8 * nbytes):
        if j < 32:
            out = raw_update(1 << j, bytes(nbytes))
        else:
            bit = j - 32
            data = bytearray(nbytes)
            data[bit // 8] = 1 << (bit % 8)
            out = raw_update(0, data)
        for i in range(32):
            if out >> i & 1:
                taps[i] |= 1 << j
    return tuple(taps)


def apply_taps(taps, value: Value):
    """The 32-bit value whose bit i is the XOR of the bits of ``value`` selected by ``taps[i]``."""
    bits = []
    for mask in taps:
        selected = [value[j] for j in range(mask.bit_length()) if mask >> j & 1]
        bits.append(Cat(*selected).xor() if selected else Const(0, 1))
    return Cat(*bits)


def crc_update(m, state, data, nbytes):
    """Next raw CRC state after the ``nbytes`` bytes of ``data`` (lane 0 first), as a new signal.

    The inputs are first given names of their own: every tap slices them, and slicing a compound
    expression would copy the whole expression into each of the XOR trees.
    """
    inputs = Signal(32 + 8 * nbytes)
    result = Signal(32)
    m.d.comb += [inputs.eq(Cat(state, data)), result.eq(apply_taps(update_taps(nbytes), inputs))]
    return result


def _matrix_of(function):
    """Rows (as bit masks over the 32 input bits) of a linear map on 32-bit states."""
    rows = [0] * 32
    for j in range(32):
        out = function(1 << j)
        for i in range(32):
            if out >> i & 1:
                rows[i] |= 1 << j
    return rows


def _invert(rows):
    """Inverse of a 32x32 GF(2) matrix given as row masks."""
    augmented = [(rows[i], 1 << i) for i in range(32)]
    for col in range(32):
        pivot = next(r for r in range(col, 32) if augmented[r][0] >> col & 1)
        augmented[col], augmented[pivot] = augmented[pivot], augmented[col]
        for r in range(32):
            if r != col and augmented[r][0] >> col & 1:
                augmented[r] = (augmented[r][0] ^ augmented[col][0], augmented[r][1] ^ augmented[col][1])
    return [augmented[i][1] for i in range(32)]


@cache
def rewind_taps(nbytes):
    """Taps of the inverse of :func:`advance` by ``nbytes`` zero bytes."""
    return tuple(_invert(_matrix_of(lambda s: advance(s, nbytes))))


def residue_after(zero_bytes):
    """The raw state of a correct region+ICRC followed by ``zero_bytes`` zero bytes."""
    return advance(RAW_RESIDUE, zero_bytes)


# --- ICRC masks ---------------------------------------------------------------------------------------

def _byte_range(table, name):
    bit, width = field_offsets(table)[name]
    return bit // 8, (bit + width - 1) // 8


def icrc_field_masks(l3_offset, ipv6):
    """``{frame byte offset: OR mask}`` of the ICRC computation for one header layout.

    Bytes ``[l3_offset - 4, l3_offset)`` stand for the last four of the eight 0xFF bytes that precede the
    IP header in the ICRC (the first four cancel the CRC's initial inversion, see the module docstring);
    every earlier byte is zeroed by the caller.
    """
    masks = {l3_offset - 4 + i: 0xFF for i in range(4)}
    if ipv6:
        masks[l3_offset] = 0x0F     # version stays, the top of the traffic class is masked
        for name in ("traffic_class", "flow_label", "hop_limit"):
            first, last = _byte_range(IPV6_HEADER, name)
            for b in range(max(first, 1), last + 1):
                masks[l3_offset + b] = 0xFF
        udp = l3_offset + 40
    else:
        for name in ("dscp", "ecn", "ttl", "checksum"):
            first, last = _byte_range(IPV4_HEADER, name)
            for b in range(first, last + 1):
                masks[l3_offset + b] = 0xFF
        udp = l3_offset + 20
    first, last = _byte_range(UDP_HEADER, "checksum")
    for b in range(first, last + 1):
        masks[udp + b] = 0xFF
    first, _ = _byte_range(BTH, "fecn")
    masks[udp + 8 + first] = 0xFF
    return masks


# (vlan, ipv6) -> layer-3 offset; the index of a layout is vlan + 2 * ipv6
ICRC_MASK_LAYOUTS = [(vlan, ipv6, 18 if vlan else 14) for ipv6 in (0, 1) for vlan in (0, 1)]


def icrc_beat_masks(m, layout, beat_index, nbytes):
    """AND and OR masks of the beat at ``beat_index`` of a frame, for mask layout ``layout``.

    ``masked = (data & and_mask) | or_mask`` zeroes every byte before the ICRC's 0xFF prefix and sets
    the masked fields to ones; beats past the last masked field pass unchanged.
    """
    width = 8 * nbytes
    and_mask = Signal(width, init=(1 << width) - 1)
    or_mask = Signal(width)
    m.d.comb += [and_mask.eq(and_mask.init), or_mask.eq(0)]
    last_masked = max(max(icrc_field_masks(l3, ipv6)) for _, ipv6, l3 in ICRC_MASK_LAYOUTS)
    with m.Switch(layout):
        for index, (_, ipv6, l3) in enumerate(ICRC_MASK_LAYOUTS):
            with m.Case(index):
                masks = icrc_field_masks(l3, ipv6)
                for k in range(last_masked // nbytes + 1):
                    lanes = range(k * nbytes, (k + 1) * nbytes)
                    or_value = sum(masks.get(p, 0) << (8 * (p - k * nbytes)) for p in lanes)
                    and_value = sum((0xFF if p >= l3 - 4 else 0) << (8 * (p - k * nbytes)) for p in lanes)
                    with m.If(beat_index == k):
                        m.d.comb += [or_mask.eq(or_value), and_mask.eq(and_value)]
    return and_mask, or_mask
