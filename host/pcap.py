"""pcap input and output of Ethernet frames.

Reading accepts classic pcap (either byte order, micro- or nanosecond timestamps) and pcapng, through
scapy's raw readers; writing produces classic little-endian pcap with microsecond timestamps and link
type 1 (Ethernet), which Wireshark, tshark and tcpdump open.
"""

import struct
import time

from scapy.utils import RawPcapReader

__all__ = ["read_pcap", "read_pcap_timed", "write_pcap", "LINKTYPE_ETHERNET"]

LINKTYPE_ETHERNET = 1
_SNAPLEN = 262144


def read_pcap_timed(path):
    """``[(timestamp in seconds, frame bytes)]`` of an Ethernet pcap or pcapng file."""
    frames = []
    with RawPcapReader(str(path)) as reader:
        for data, meta in reader:
            if hasattr(meta, "sec"):                          # classic pcap
                linktype = reader.linktype
                resolution = 1e9 if getattr(reader, "nano", False) else 1e6
                stamp = meta.sec + meta.usec / resolution
            else:                                             # pcapng: per interface
                linktype = meta.linktype
                stamp = ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
            if linktype != LINKTYPE_ETHERNET:
                raise ValueError(f"{path}: link type {linktype} is not Ethernet ({LINKTYPE_ETHERNET})")
            frames.append((stamp, bytes(data)))
    return frames


def read_pcap(path):
    """The frames of an Ethernet pcap or pcapng file, as bytes, in file order."""
    return [frame for _, frame in read_pcap_timed(path)]


def write_pcap(path, frames, timestamps=None):
    """Write ``frames`` (an iterable of bytes) to a classic pcap file with Ethernet link type.

    ``timestamps`` (seconds, one per frame) default to the time of writing plus 1 microsecond per frame.
    """
    frames = [bytes(frame) for frame in frames]
    if timestamps is None:
        start = int(time.time() * 1e6)
        micros = [start + i for i in range(len(frames))]
    else:
        micros = [round(stamp * 1e6) for stamp in timestamps]
        if len(micros) != len(frames):
            raise ValueError(f"{len(micros)} timestamps for {len(frames)} frames")
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, _SNAPLEN, LINKTYPE_ETHERNET))
        for stamp, frame in zip(micros, frames):
            if len(frame) > _SNAPLEN:
                raise ValueError(f"frame of {len(frame)} bytes exceeds the snap length {_SNAPLEN}")
            seconds, usec = divmod(stamp, 1_000_000)
            out.write(struct.pack("<IIII", seconds, usec, len(frame), len(frame)))
            out.write(frame)
