"""Where the RoCE v2 captures from real NICs are: ../shared/captures beside the repository, or
$NETREDUCE_CAPTURES. A missing folder is an error, never a skip."""

import os
from pathlib import Path

CAPTURES = Path(os.environ.get("NETREDUCE_CAPTURES")
                or Path(__file__).resolve().parents[2] / "shared" / "captures")


def capture_files(bad=None):
    """Every .pcap under the captures folder; ``bad=True``/``False`` picks those under icrc_bad/ or not."""
    if not CAPTURES.is_dir():
        raise FileNotFoundError(f"RoCE v2 captures not found at {CAPTURES} (set NETREDUCE_CAPTURES)")
    files = sorted(CAPTURES.rglob("*.pcap"))
    if not files:
        raise FileNotFoundError(f"no .pcap files under {CAPTURES}")
    if bad is not None:
        files = [f for f in files if (f.parent.name == "icrc_bad") == bad]
    return files
