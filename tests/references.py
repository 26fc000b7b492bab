"""Test helpers: the RoCE v2 captures from real NICs (tests/data/captures, with their provenance in its
README.md) and independent references written from the RFCs and the IBA."""

from pathlib import Path

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"


def capture_files(bad=None):
    """Every .pcap under the captures folder; ``bad=True``/``False`` picks those under icrc_bad/ or not."""
    files = sorted(CAPTURES.rglob("*.pcap"))
    if not files:
        raise FileNotFoundError(f"no .pcap files under {CAPTURES}")
    if bad is not None:
        files = [f for f in files if (f.parent.name == "icrc_bad") == bad]
    return files


# --- independent references for the tests (written from the RFCs and the IBA, not from the code) ------

EXTENSION_ORDER = ("deth", "reth", "aeth", "immdt", "ieth")


def ones_complement_sum(data):
    """RFC 1071 ones'-complement sum of big-endian 16-bit words."""
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def extensions_of(opcode):
    """The extension headers an opcode carries, in wire order."""
    from netreduce.wire import OPCODES
    info = OPCODES.get(opcode)
    return [name for name in EXTENSION_ORDER if info is not None and getattr(info, name)]
