"""pcap input and output of Ethernet frames.

Reading accepts classic pcap (either byte order, micro- or nanosecond timestamps) and pcapng, through
scapy's raw readers; :func:`read_pcapng` also gives each frame's interface, direction and comments.
:func:`write_pcap` writes classic little-endian pcap with microsecond timestamps and link type 1
(Ethernet); :class:`PcapNgWriter` writes pcapng with named interfaces, nanosecond timestamps and a
direction and comment per frame, which a simulation's captures need. Wireshark, tshark and tcpdump open
both.

The pcapng blocks are written here rather than by scapy's ``RawPcapNgWriter``, which (scapy 2.6 to 2.8)
stamps in microseconds only, with no ``if_tsresol`` option, and always describes an unnamed interface 0.
"""

import struct
import time
from collections import namedtuple

from scapy.utils import RawPcapNgReader, RawPcapReader

__all__ = ["read_pcap", "read_pcap_timed", "read_pcapng", "write_pcap", "PcapNgWriter", "PcapNgRecord",
           "LINKTYPE_ETHERNET", "INBOUND", "OUTBOUND"]

LINKTYPE_ETHERNET = 1
INBOUND, OUTBOUND = 1, 2        # pcapng packet directions (bits 0-1 of the epb_flags option)
_SNAPLEN = 262144

PcapNgRecord = namedtuple("PcapNgRecord", "time_ns interface direction comments frame")


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


def read_pcapng(path):
    """Every frame of a pcapng file as a :data:`PcapNgRecord`: ``time_ns`` (an integer),
    ``interface`` (its name, or ``""``), ``direction`` (:data:`INBOUND`, :data:`OUTBOUND`, or 0 when
    not recorded), ``comments`` (strings) and ``frame`` (bytes), in file order."""
    records = []
    with RawPcapNgReader(str(path)) as reader:
        for data, meta in reader:
            ticks = (meta.tshigh << 32) | meta.tslow
            comments = getattr(meta, "comments", None) or getattr(meta, "comment", None) or []
            if isinstance(comments, bytes):             # scapy 2.6 keeps one comment, as bytes
                comments = [comments]
            records.append(PcapNgRecord(ticks * 10**9 // meta.tsresol, (meta.ifname or b"").decode(),
                                        meta.direction or 0, [c.decode() for c in comments],
                                        bytes(data)))
    return records


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
        for stamp, frame in zip(micros, frames, strict=True):
            if len(frame) > _SNAPLEN:
                raise ValueError(f"frame of {len(frame)} bytes exceeds the snap length {_SNAPLEN}")
            seconds, usec = divmod(stamp, 1_000_000)
            out.write(struct.pack("<IIII", seconds, usec, len(frame), len(frame)))
            out.write(frame)


def _block(kind, body, options=()):
    """One pcapng block: type, total length, ``body`` padded to 32 bits, ``options`` (``(code, bytes)``
    pairs, each padded, then the end of options), total length again. Little-endian."""
    body += bytes(-len(body) % 4)
    if options:
        body += b"".join(struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)
                         for code, value in options) + struct.pack("<HH", 0, 0)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


class PcapNgWriter:
    """A pcapng file of Ethernet frames seen on ``interfaces`` (their names, in order), written as they
    come: one section, one interface description per name (link type Ethernet, nanosecond timestamps),
    then an enhanced packet block per frame with its interface, time, direction and optional comment.
    A context manager; :meth:`close` ends the file."""

    def __init__(self, path, interfaces):
        self.file = open(path, "wb")     # noqa: SIM115 (the writer is the context manager; close() ends it)
        self.interfaces = list(interfaces)
        self.frames = 0
        self.file.write(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        for name in self.interfaces:                   # if_name (2); if_tsresol (9): 10^-9 s
            self.file.write(_block(1, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, _SNAPLEN),
                                   [(2, name.encode()), (9, bytes([9]))]))

    def write(self, interface, frame, time_ns, direction=0, comment=None):
        """Add ``frame`` seen on interface number ``interface`` at ``time_ns`` (an integer), going
        ``direction`` (:data:`INBOUND` or :data:`OUTBOUND`; 0: not said), with an optional ``comment``."""
        frame = bytes(frame)
        if not 0 <= interface < len(self.interfaces):
            raise ValueError(f"interface {interface} of {len(self.interfaces)}")
        if len(frame) > _SNAPLEN:
            raise ValueError(f"frame of {len(frame)} bytes exceeds the snap length {_SNAPLEN}")
        options = [(2, struct.pack("<I", direction))] if direction else []
        if comment:
            options.append((1, comment.encode()))
        header = struct.pack("<5I", interface, time_ns >> 32, time_ns & 0xFFFFFFFF, len(frame), len(frame))
        self.file.write(_block(6, header + frame, options))
        self.frames += 1

    def close(self):
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
