"""The switch's control registers and counters, declared once.

Everything else is generated from the declarations below: the RTL's register decoder
(``netreduce.hw.csr.decode_registers``, which refuses a map and a design that disagree), the table in
docs/ARCHITECTURE.md ("Switch RTL", checked by ``tests/test_registers.py``), the manifest that
``netreduce generate`` writes beside the Verilog, and the configuration writes of the testbenches and the
host library (:func:`switch_config_writes`).

The register port is word addressed (``ADDRESS_BITS``), 32 bits a word. A register wider than 32 bits
takes consecutive words, least significant first. Each block is repeated ``count`` times (a build
parameter) at ``base + stride * index``.
"""

from dataclasses import dataclass

from .egress import CLASSES, DSCPS, MAX_DEPTH_BEATS, MAX_QUEUES, QUANTUM_LIMIT
from .wire import CONTROL_PORT

__all__ = [
    "COUNTERS", "HISTOGRAM_COUNTERS", "ADDRESS_BITS", "WORD_BITS", "READ_LATENCY", "Register", "Block", "BLOCKS",
    "SWITCH", "JOB", "FORWARDING", "COUNTER_BLOCK",
    "CONNECTION", "EGRESS", "EGRESS_COUNTERS", "ETHERNET", "ETHERNET_COUNTERS", "block", "instances", "address",
    "counter_address", "check_map",
    "register_writes", "switch_config_writes", "vlan_word", "markdown_table", "manifest", "locate", "RegisterFile",
]

# Every counter the switch keeps (docs/ARCHITECTURE.md, "Switch behaviour, per received frame"), in the
# order of their addresses.
COUNTERS = (
    "frames_in", "frames_out", "forwarded", "aggregated", "results_sent", "duplicates_answered",
    "duplicates_dropped", "passthrough_gap", "passthrough_stale", "passthrough_sequence",
    "passthrough_opcode", "drop_bad_icrc", "drop_bad_checksum", "drop_bad_header", "drop_no_credit",
    "drop_bad_length", "drop_control", "drop_oversize", "credits_sent", "credit_requests", "acks_seen",
    "drop_spoofed", "acks_ahead",
    "deadline_completions", "late", "result_requests", "results_resent", "result_requests_stale",
    "result_requests_refused",
    "contributors_0", "contributors_1", "contributors_2", "contributors_3", "contributors_4", "contributors_5",
    "contributors_6", "contributors_7", "contributors_8_or_more",
    "management_requests", "management_refused", "management_bad",
)

# the bounded-loss completions by number of contributors, among the counters (the last one: 8 or more)
HISTOGRAM_COUNTERS = tuple(f"contributors_{n}" for n in range(8)) + ("contributors_8_or_more",)
assert set(HISTOGRAM_COUNTERS) <= set(COUNTERS)

ADDRESS_BITS = 16
WORD_BITS = 32
# the register port's reads are pipelined: ``rdata`` shows the word at the ``addr`` of READ_LATENCY clocks
# before (a read every clock; the egress stage's per-class counters take two of them, in distributed RAM, and
# the read's multiplexers two more)
READ_LATENCY = 4


@dataclass(frozen=True)
class Register:
    """``bits`` wide at word ``offset`` of its block. ``access``: ``wo`` (written and kept; a read gives 0:
    a read port over every configuration word would cost more than it is worth), ``action`` (the same, and
    the write itself acts: an enable resets the state it enables), ``ro`` (read only)."""
    name: str
    offset: int
    bits: int
    doc: str
    access: str = "wo"
    init: int = 0
    group: str = ""         # registers of one array share it (``dscp{d}_class``): one row in the docs

    @property
    def words(self):
        return -(-self.bits // WORD_BITS)


@dataclass(frozen=True)
class Block:
    """``registers`` repeated ``count`` times (the name of a build parameter; None: once) from ``base``,
    ``stride`` words apart."""
    name: str
    base: int
    stride: int
    count: str | None
    registers: tuple
    doc: str

    def register(self, name):
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name} has no register {name!r}")


SWITCH = Block("switch", 0x0000, 0, None, (
    Register("mac", 0, 48, "the switch's MAC: source of its CREDIT frames; a frame from it is a spoof"),
    Register("ip", 2, 32, "the switch's IPv4 address: control packets go to it; a frame from it is a spoof"),
    Register("control_port", 3, 16, "UDP port of control packets (source and destination)", init=CONTROL_PORT),
    Register("default_port", 4, 8, "port of frames to a MAC not in the forwarding table, broadcast too"),
), "the switch")

JOB = Block("job", 0x0010, 8, "jobs", (
    Register("id", 0, 16, "job id, as in the aggregation header"),
    Register("workers", 1, 8, "N, workers of the job (at most the build's)"),
    Register("enable", 2, 1, "1: the job runs; writing resets its state (the oldest message to `start_msg`)",
             access="action"),
    Register("mtu", 3, 13, "largest payload of a packet in bytes (at most the build's; default the build's)"),
    Register("start_msg", 4, 32, "the job's first message sequence number (modulo 2^32)"),
    Register("traffic_class", 5, 1, "0: reliable (RC messages); 1: bounded-loss (MLT: single-packet UC messages, "
             "completed at a deadline)"),
    Register("deadline_clocks", 6, 32, "bounded-loss: clocks from a message's opening to its forced completion "
             "(at least 1, below 2^31)"),
), "job j (of `jobs`)")

FORWARDING = Block("forwarding", 0x0100, 4, "forwarding_entries", (
    Register("mac", 0, 48, "destination MAC"),
    Register("port", 2, 8, "its port"),
    Register("enable", 3, 1, "1: the entry is used"),
), "forwarding entry e (of `forwarding_entries`)")

COUNTER_BLOCK = Block("counters", 0x0200, 0, None, tuple(
    Register(name, i, 32, "counter (wraps at 2^32)", access="ro") for i, name in enumerate(COUNTERS)
), "the counters, read only")

_VLAN_DOC = "0: untagged; 0x1000 + VID: tagged with VLAN VID (PCP and DEI not compared)"
CONNECTION = Block("connection", 0x1000, 16, "connections", (
    Register("requester_mac", 0, 48, "requester (the worker's host): MAC; data frames come from it"),
    Register("requester_ip", 2, 32, "requester IPv4 address (the data key's source)"),
    Register("requester_qpn", 3, 24, "requester QPN (the ACK key's destination QP)"),
    Register("requester_port", 4, 8, "the port data frames arrive on"),
    Register("requester_vlan", 5, 13, f"the VLAN of data frames: {_VLAN_DOC}"),
    Register("responder_mac", 6, 48, "responder (the peer host): MAC; ACKs and NAKs come from it"),
    Register("responder_ip", 8, 32, "responder IPv4 address (the ACK key's source)"),
    Register("responder_qpn", 9, 24, "responder QPN (the data key's destination QP)"),
    Register("responder_port", 10, 8, "the port ACKs and NAKs arrive on"),
    Register("responder_vlan", 11, 13, f"the VLAN of ACKs and NAKs: {_VLAN_DOC}"),
    Register("start_psn", 12, 24, "the requester's first PSN"),
    Register("enable", 13, 1, "1: the connection is matched; writing resets its state (from `start_psn` and "
             "its job's `start_msg`)", access="action"),
    Register("responder_rkey", 14, 32, "bounded-loss: the R_Key of the responder's result buffer, in every "
             "result to it"),
), "connection c = j N + w (of `connections` = `jobs` x `workers`)")



def _array(pattern, index, count, offset, stride, bits, doc, access="wo"):
    """``count`` registers named ``pattern`` with ``{index}`` 0, 1, ... at ``offset``, ``stride`` words apart."""
    return tuple(Register(pattern.replace("{" + index + "}", str(i)), offset + stride * i, bits, doc, access,
                          group=pattern) for i in range(count))


# per class, 32 bits each, read only; then ``drops_oversize``, ``high_water{q}``, ``occupancy``
EGRESS_COUNTERS = {
    "drops_threshold": "class c: frames dropped at admission, the buffer at or above the class's threshold",
    "drops_full": "class c: frames dropped at admission, a largest frame not fitting",
    "frames_out": "class c: frames sent",
    "bytes_out": "class c: bytes sent",
}
_EGRESS_QUEUE_BITS = (MAX_QUEUES - 1).bit_length()
_EGRESS_THRESHOLD_BITS = MAX_DEPTH_BEATS.bit_length()
_EGRESS_CONFIG = 64 + 3 * CLASSES + 1 + MAX_QUEUES          # words of configuration before the counters
EGRESS = Block("egress", 0x2000, 256, "ports", (
    *_array("dscp{d}_class", "d", DSCPS, 0, 1, 5, "the class of DSCP d (a number past 18 counts as OTHER)"),
    *_array("class{c}_queue", "c", CLASSES, 64, 3, _EGRESS_QUEUE_BITS,
            "class c: its priority queue, 0 the highest (a number past Q - 1 counts as Q - 1)"),
    *_array("class{c}_droppable", "c", CLASSES, 65, 3, 1, "class c: 1 if its frames may be dropped (when the "
            "switch marks them lossy)"),
    *_array("class{c}_threshold", "c", CLASSES, 66, 3, _EGRESS_THRESHOLD_BITS,
            "class c: the buffer occupancy (beats) at or above which a droppable frame of it is dropped"),
    Register("scheduling", 64 + 3 * CLASSES, 1, "0: strict priority; 1: deficit round robin"),
    *_array("quantum{q}", "q", MAX_QUEUES, 64 + 3 * CLASSES + 1, 1, QUANTUM_LIMIT.bit_length(),
            "queue q's deficit round robin quantum, beats (for q < Q; 0 counts as 1)"),
    *[r for n, (name, doc) in enumerate(EGRESS_COUNTERS.items())
      for r in _array(f"{name}{{c}}", "c", CLASSES, _EGRESS_CONFIG + n * CLASSES, 1, 32, f"{doc} (wraps at 2^32)",
                      access="ro")],
    Register("drops_oversize", _EGRESS_CONFIG + 4 * CLASSES, 32, "frames longer than `max_frame`, dropped whole",
             access="ro"),
    *_array("high_water{q}", "q", MAX_QUEUES, _EGRESS_CONFIG + 4 * CLASSES + 1, 1, 32,
            "the most beats queue q has held (0 for q >= Q)", access="ro"),
    Register("occupancy", _EGRESS_CONFIG + 4 * CLASSES + 1 + MAX_QUEUES, 32, "beats in the buffer now",
             access="ro"),
), "the egress stage of port i (of `ports`); reset: the default map of `netreduce.egress` for the build")

# each port's Ethernet MAC on a board (``hw.ethernet.EthernetPort``), read only, 32 bits each, in this order
ETHERNET_COUNTERS = {
    "rx_good": "good frames received (FCS right, 64 bytes at least, none of the faults below)",
    "rx_drops_fcs": "frames received with a wrong FCS, dropped",
    "rx_drops_runt": "frames received shorter than 64 bytes, dropped",
    "rx_drops_error": "frames received with the PHY's error signal, dropped",
    "rx_drops_oversize": "frames received longer than the largest frame, dropped",
    "rx_preamble_errors": "frames whose first byte after the preamble is not the SFD, ignored",
    "rx_drops_full": "good frames that found the receive buffer full, dropped",
    "tx_frames": "frames sent",
    "tx_underruns": "frames whose bytes ran dry while sent, marked with the error signal (never, by design)",
}
ETHERNET = Block("ethernet", 0x3000, 16, "ethernet_ports", tuple(
    Register(name, i, 32, f"{doc} (wraps at 2^32)", access="ro")
    for i, (name, doc) in enumerate(ETHERNET_COUNTERS.items())
), "the Ethernet MAC of port i on a board (of `ports`, in a build with `ethernet`; none otherwise)")

BLOCKS = (SWITCH, JOB, FORWARDING, COUNTER_BLOCK, CONNECTION, EGRESS, ETHERNET)


def block(name):
    for b in BLOCKS:
        if b.name == name:
            return b
    raise KeyError(f"no register block {name!r}")


def instances(blk, params):
    """How many times ``blk`` is repeated in a build of parameters ``params`` (``NetReduceSwitch.parameters``)."""
    if blk.count is None:
        return 1
    if blk.count == "connections":
        return params["jobs"] * params["workers"]
    if blk.count == "ethernet_ports":         # a board's switch, behind its ports' MACs
        return params["ports"] if params.get("ethernet") else 0
    return params[blk.count]


def address(block_name, index, register_name, word=0):
    blk = block(block_name)
    return blk.base + blk.stride * index + blk.register(register_name).offset + word


def counter_address(name):
    return COUNTER_BLOCK.base + COUNTERS.index(name)


def check_map(params):
    """Every word of every instance lies in the address space and belongs to one register only."""
    owner = {}
    for blk in BLOCKS:
        for index in range(instances(blk, params)):
            for r in blk.registers:
                for word in range(r.words):
                    at = blk.base + blk.stride * index + r.offset + word
                    if not 0 <= at < 1 << ADDRESS_BITS:
                        raise ValueError(f"{blk.name}[{index}].{r.name} at {at:#x} is outside the address space")
                    if at in owner:
                        raise ValueError(f"{blk.name}[{index}].{r.name} and {owner[at]} share word {at:#x}")
                    owner[at] = f"{blk.name}[{index}].{r.name}"
    return owner


def locate(word_address, params):
    """``(block, index, register, word)`` of the register word at ``word_address`` in a build of ``params``,
    or ``None`` where no register is."""
    for blk in BLOCKS:
        offset = word_address - blk.base
        if offset < 0:
            continue
        index, at = divmod(offset, blk.stride) if blk.stride else (0, offset)
        if index >= instances(blk, params):
            continue
        for r in blk.registers:
            if r.offset <= at < r.offset + r.words:
                return blk, index, r, at - r.offset
    return None


class RegisterFile:
    """The writable registers of a build as the register port keeps them, for the golden model: each
    instance's ``wo`` and ``action`` registers from their reset values (``init``, ``reset`` for any the
    build sets otherwise), written a word at a time and cut to the register's width, as the RTL's decoder
    does (``limits``: ``{(block name, register name): largest}``, a larger word written is taken as it). A write
    to a read-only or unmapped word is ignored."""

    def __init__(self, params, reset=None, limits=None):
        check_map(params)
        self.params, self.limits = params, limits or {}
        self.values = {}
        for blk in BLOCKS:
            for index in range(instances(blk, params)):
                for r in blk.registers:
                    if r.access != "ro":
                        self.values[blk.name, index, r.name] = r.init
        for key, value in (reset or {}).items():
            self.values[key] = value

    def write(self, word_address, word):
        """Write ``word``; ``(block, index, register)`` written, or ``None`` (nothing is)."""
        found = locate(word_address, self.params)
        if found is None or found[2].access == "ro":
            return None
        blk, index, r, word_index = found
        key = (blk.name, index, r.name)
        word = min(word, self.limits.get((blk.name, r.name), word))
        low = WORD_BITS * word_index
        value = (self.values[key] & ~(0xFFFFFFFF << low)) | ((word & 0xFFFFFFFF) << low)
        self.values[key] = value & ((1 << r.bits) - 1)
        return key

    def __getitem__(self, key):
        """The value of ``(block name, index, register name)``."""
        return self.values[key]


def register_writes(block_name, index, **values):
    """``[(word address, 32-bit word), ...]`` that write ``values`` (by register name) into an instance,
    in the order given (an ``action`` register last, if it is to act after the others)."""
    blk = block(block_name)
    writes = []
    for name, value in values.items():
        r = blk.register(name)
        if r.access == "ro":
            raise ValueError(f"{block_name}.{name} is read only")
        value = int(value)
        if not 0 <= value < 1 << r.bits:
            raise ValueError(f"{block_name}.{name} = {value:#x} does not fit in {r.bits} bits")
        for word in range(r.words):
            writes.append((address(block_name, index, name, word), (value >> WORD_BITS * word) & 0xFFFFFFFF))
    return writes


def vlan_word(vid):
    """A connection's VLAN register: ``None`` (untagged) or a VLAN id."""
    if vid is None:
        return 0
    if not 0 <= vid < 1 << 12:
        raise ValueError(f"VLAN id {vid} does not fit in 12 bits")
    return 0x1000 | vid


def switch_config_writes(config, workers):
    """The register writes that load ``config`` (a :class:`netreduce.sim.switch_model.SwitchConfig`) into a
    build of ``workers`` workers per job: the switch, the forwarding table, then each job and its
    connections (a job's ``start_msg`` before the enables that read it), jobs at indices 0, 1, ... in the
    order configured."""
    from .host.protocol import ip_to_int, mac_to_int
    writes = register_writes("switch", 0, mac=mac_to_int(config.mac), ip=ip_to_int(config.ip),
                             control_port=config.control_port, default_port=config.default_port)
    for e, (mac, port) in enumerate(config.forwarding.items()):
        writes += register_writes("forwarding", e, mac=mac_to_int(mac), port=port, enable=1)
    position = {job.job: j for j, job in enumerate(config.jobs)}
    for j, job in enumerate(config.jobs):
        writes += register_writes("job", j, id=job.job, workers=job.workers, mtu=job.mtu,
                                  start_msg=job.start_msg, traffic_class=int(job.lossy),
                                  deadline_clocks=job.deadline_clocks or 0, enable=1)
    for conn in config.connections:
        writes += register_writes(
            "connection", position[conn.job] * workers + conn.worker,
            requester_mac=mac_to_int(conn.requester_mac), requester_ip=ip_to_int(conn.requester_ip),
            requester_qpn=conn.requester_qpn, requester_port=conn.requester_port,
            requester_vlan=vlan_word(conn.requester_vlan),
            responder_mac=mac_to_int(conn.responder_mac), responder_ip=ip_to_int(conn.responder_ip),
            responder_qpn=conn.responder_qpn, responder_port=conn.responder_port,
            responder_vlan=vlan_word(conn.responder_vlan),
            start_psn=conn.start_psn % (1 << 24), responder_rkey=conn.responder_rkey or 0, enable=1)
    return writes


def _place(blk):
    if blk.count is None:
        return f"{blk.base:#06x}"
    return f"{blk.base:#06x} + {blk.stride} i"


def markdown_table():
    """The register table of docs/ARCHITECTURE.md."""
    lines = ["| word address | block | register | bits | access | what |", "|---|---|---|---|---|---|"]
    for blk in BLOCKS:
        if blk is COUNTER_BLOCK:
            lines.append(f"| {blk.base:#06x} + i | {blk.name} | counter i of `COUNTERS` ({len(COUNTERS)}: "
                         f"{', '.join(COUNTERS)}) | 32 | ro | {blk.doc} |")
            continue
        shown = set()
        for r in blk.registers:
            if r.group:
                if r.group in shown:
                    continue
                shown.add(r.group)
                members = [g for g in blk.registers if g.group == r.group]
                index = r.group[r.group.index("{") + 1:r.group.index("}")]
                stride = members[1].offset - r.offset
                words = f"+{r.offset} + {stride if stride > 1 else ''}{index}, {index} < {len(members)}"
                name = r.group
            else:
                words = f"+{r.offset}" if r.words == 1 else f"+{r.offset}..+{r.offset + r.words - 1}"
                name = r.name
            init = f" (reset {r.init})" if r.init else ""
            lines.append(f"| {_place(blk)} {words} | {blk.name} ({blk.doc}) | `{name}` | {r.bits} | {r.access} "
                         f"| {r.doc}{init} |")
    return "\n".join(lines)


def manifest(params):
    """The register map of a build, for ``netreduce generate``'s manifest: each block with its base, stride,
    instance count and registers, and the clocks from a read's address to its word (``read_latency``)."""
    check_map(params)
    return {
        "address_bits": ADDRESS_BITS, "word_bits": WORD_BITS, "read_latency": READ_LATENCY,
        "blocks": [{"name": blk.name, "base": blk.base, "stride": blk.stride, "count": instances(blk, params),
                    "registers": [{"name": r.name, "offset": r.offset, "words": r.words, "bits": r.bits,
                                   "access": r.access, "init": r.init, "doc": r.doc} for r in blk.registers]}
                   for blk in BLOCKS],
    }
