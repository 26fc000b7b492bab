"""The NetReduce switch (``NetReduceSwitch``): its components, composed in the order a frame flows through them.

The behaviour is the contract of docs/ARCHITECTURE.md ("Aggregation (the NetReduce switch)"), from which
the golden model ``netreduce.sim.switch_model`` is written too. The stages:

1. *in*: ``hw.ports.FrameArbiter`` takes whole frames from the ``ports`` input ports (round robin; oldest first
   from ports narrower than the core, each frame held whole by ``hw.gearbox.WholeFrames``, which cuts one
   longer than its buffer short there) into the
   one pipeline (one beat per clock in all: each port alone runs at line rate, all of them together
   share one port's worth; docs "Open items"); ``hw.parser.RoceParser`` gives each frame's header record,
   then its payload stream with the verdicts; ``records.HeaderRecords`` holds each record until its frame is
   decided and hands it to ``match.ConnectionMatch``, which matches each header to its connection and checks
   the binding, from configuration only, as headers arrive, and hands on the fields the monitor decides on.
2. *monitor* (``monitor.StatusMonitor``): each frame's fate, one frame at a time, from its header, its
   match, the state and its payload: it owns every connection's, message's and packet slot's state, writes
   contributions into the banks and frames that go on into the packet ring, and queues descriptors, each
   frame's fate (``records.HeaderRecords`` then hands the record of a frame that goes on to the emitter and
   writes a contribution's into the header store) and sum requests, in commit order.
3. *sum* (``hw.slots.SlotMemory``): a full bitmap's sum request reads the banks through the adder tree
   into the result memory.
4. *out*: ``emitter.Emitter`` turns the descriptors, in order, into frames (a frame that goes on from the
   packet ring, the answer to a duplicate, the N results of a slot from the header store and the sum,
   CREDIT control frames); ``hw.deparser.RoceDeparser`` serializes them and recomputes ICRC and IPv4
   checksum. Each frame's class goes with it, through ``forwarding.ForwardingTable`` (the port of its
   destination MAC; the default port for any other MAC) and a queue, to ``hw.egress.ClassJoin``, which puts
   class and port on the frame's beats. The management agent's replies join them (``hw.ports.FrameArbiter``;
   a reply names its request's port); ``hw.ports.FrameRouter``, behind two registers (``to_router``), sends
   each frame out of the port its beats name, through that port's ``hw.egress.EgressQueues`` (MLT's
   priority queues and drops by class).

Configuration and counters: ``registers.SwitchRegisters``, the map of ``netreduce.registers`` behind ``csr``
(docs/ARCHITECTURE.md, "Switch RTL", has the table), or with a ``management`` address the in-band agent
(``management.ManagementAgent``).

The frames leave in the golden model's order: the outputs of each frame in the order of the frames.
Throughput: one payload beat per clock within a frame, plus one clock per frame of a connection in the
monitor (``LOOKUP``; two at 64 bits, where each frame's headers leave clocks to spare); the deparser starts a
frame only once its first payload word is there, and the payload sequencer then keeps up with it, so
frames out never pause in the middle (docs: "Open items").
"""

import dataclasses

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...egress import MAX_DEPTH_BEATS
from ...registers import COUNTERS
from ...wire import DTYPE_CODES, ETH_MIN_FRAME, ICRC_BYTES, MAX_HEADER_BYTES, SWITCH_WIDTHS, ManagementAddress
from ..csr import csr_signature
from ..deparser import RoceDeparser
from ..egress import ClassJoin, EgressBeat, EgressQueues, FrameClass, check_geometry
from ..ethernet import EthernetStatus
from ..fp.adder import check_int
from ..gearbox import NarrowBeats, WholeFrames, WidenBeats, check_port_width
from ..parser import RoceParser
from ..ports import FrameArbiter, FrameRouter, check_ports
from ..ram import IN_BLOCK_RAM, NO_COLLISION, BlockRAMReadPort, RegisterFIFO
from ..slots import SlotMemory
from ..stream import (
    axi_stream_signature,
    axis_to_frames,
    fifo_to_stream,
    frames_to_axis,
    stream_to_fifo,
)
from .emitter import OWN_BYTES, Emitter, StoredHeader
from .forwarding import ForwardingTable
from .management import ManagementAgent
from .match import ConnectionMatch
from .monitor import StatusMonitor
from .records import HeaderRecords
from .registers import SwitchRegisters

__all__ = ["NetReduceSwitch", "csr_signature"]

STAMP_BITS = 16     # the stamps of whole frames at ports narrower than the core (a frame waits far fewer clocks)


class NetReduceSwitch(wiring.Component):
    """The switch, one port. Parameters (checked here):

    - ``width``: datapath bits, 64, 256, 512 or 1024 (``netreduce.wire.SWITCH_WIDTHS``; 256: a core behind
      two 64-bit ports, 1024: behind two 512-bit ports, where frames of an even number of port beats go at line
      rate on both at once, of an odd number b at b/(b + 1) of it, frames of one at one a clock in all);
    - ``workers`` N: the most workers of a job (1..16); ``jobs`` J: jobs at once (1..16);
    - ``dtype``: the element format of every job (fp32, bf16, fp16); ``ftz``: flush subnormals;
    - ``mtu``: the largest payload of a packet in bytes; ``message_packets`` M; ``message_slots`` K, a
      power of two (the credit window);
    - ``max_frame``: the longest payload stream (whole frame if not RoCE) that can go on, bytes;
    - ``adder_stages``: pipeline depth of each adder of the tree;
    - ``ipv6``: RoCE over IPv6 is parsed (and forwarded as RoCE: its ICRC and lengths checked, re-serialized).
      Without it an IPv6 frame is IP only to its traffic class, and goes on byte for byte as a frame that is
      not RoCE (``RoceParser(ipv6=False)``; the golden model's ``SwitchConfig.ipv6``). Aggregation is RoCE
      over IPv4 either way; without it the parser and deparser are some 1,200 ECP5 logic cells smaller.
    - ``bounded_loss``: the bounded-loss class (MLT's single-packet messages with deadlines, docs "Bounded-loss
      class (MLT)") is built; it also needs ``message_slots`` of 2 or more (its window is half of them). Without
      it a job configured bounded-loss is not enabled (``SwitchRegisters``): its frames go on as frames of no
      job, as in the golden model (``SwitchConfig.bounded_loss``). For small FPGAs.

    - ``ports`` P (1..4) and ``forwarding_entries`` (1..64, entries of the MAC forwarding table);
    - ``port_width``: the ports' bits (``width`` by default), at most ``width``: each port narrower than the core
      goes in through ``hw.gearbox.WidenBeats`` and ``WholeFrames`` (a buffer of two of the longest frames),
      whose whole frames the arbiter takes oldest first, and out through ``NarrowBeats`` (docs/ARCHITECTURE.md,
      "Ports narrower than the core");
    - ``egress_queues`` Q (1..16) and ``egress_buffer`` (bytes): each port's egress stage
      (``hw.egress.EgressQueues``, MLT's priority queues and drops by class), whose buffer must hold the
      longest frame the switch sends (``max_frame`` plus the longest RoCE headers and ICRC);
      ``egress_weighted``: build its deficit round robin too (else strict priority only).
    - ``management``: a ``netreduce.wire.ManagementAddress``, the in-band control plane (``ManagementAgent``
      answers its manager's requests; docs "In-band control plane"), or None (registers through ``csr`` only).
    - ``ethernet``: the switch sits behind a board's Ethernet MACs (``hw.ethernet.EthernetPort``, one a port),
      whose counters come in on ``ethernet_status[p]`` (``EthernetStatus``, in ``sync``) and read as the register
      map's ``ethernet`` block.

    Ports: ``s_axis[p]``, ``m_axis[p]`` for each port ``p`` (AXI-Stream of ``port_width`` bits: tdata, tkeep,
    tlast, tvalid, tready; Verilog names ``s_axis__0__tdata`` ...), ``csr``; ``ethernet_status[p]`` with
    ``ethernet``.
    """

    def __init__(self, *, width=64, workers=8, jobs=2, dtype="fp32", ftz=False, mtu=1024, message_packets=4,
                 message_slots=4, max_frame=9216, adder_stages=7, ports=1, forwarding_entries=16, egress_queues=4,
                 egress_buffer=16384, egress_weighted=False, management=None, ethernet=False, port_width=None,
                 ipv6=True, bounded_loss=True):
        if width not in SWITCH_WIDTHS:      # (each of them a datapath width, ``hw.stream.WIDTHS``)
            raise ValueError(f"the switch is built for {', '.join(map(str, SWITCH_WIDTHS))} bits, not {width}")
        self.port_width = width if port_width is None else port_width
        self.port_ratio = check_port_width(self.port_width, width)
        for name, value, low, high in (("workers", workers, 1, 16), ("jobs", jobs, 1, 16),
                                       ("message_packets", message_packets, 1, 64),
                                       ("message_slots", message_slots, 1, 64),
                                       ("forwarding_entries", forwarding_entries, 1, 64)):
            check_int(value, name, low, high)
        if message_slots & (message_slots - 1):
            raise ValueError(f"message_slots must be a power of two, not {message_slots}")
        if dtype not in DTYPE_CODES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_CODES)}, not {dtype!r}")
        if not isinstance(mtu, int) or mtu % 4 or not 32 <= mtu <= 4096:
            raise ValueError(f"mtu must be a multiple of 4 from 32 to 4096, not {mtu!r}")
        if not isinstance(max_frame, int) or not max(mtu, ETH_MIN_FRAME) <= max_frame <= 16384:
            raise ValueError(f"max_frame must be from max(mtu, 60) to 16384 bytes, not {max_frame!r}")
        self.width, self.workers, self.jobs, self.dtype, self.ftz = width, workers, jobs, dtype, ftz
        self.mtu, self.message_packets, self.message_slots = mtu, message_packets, message_slots
        self.max_frame, self.adder_stages = max_frame, adder_stages
        self.ports = check_ports(ports)
        self.forwarding_entries = forwarding_entries
        self.beat_bytes = width // 8
        check_int(egress_buffer, "egress_buffer (bytes)", 1, MAX_DEPTH_BEATS * self.beat_bytes)
        if egress_buffer % self.beat_bytes:
            raise ValueError(f"egress_buffer must be a whole number of {self.beat_bytes}-byte beats, "
                             f"not {egress_buffer}")
        if not isinstance(egress_weighted, bool):
            raise ValueError(f"egress_weighted must be True or False, not {egress_weighted!r}")
        self.egress_queues, self.egress_buffer, self.egress_weighted = egress_queues, egress_buffer, egress_weighted
        if management is not None:
            if not isinstance(management, ManagementAddress):
                raise ValueError(f"management must be a ManagementAddress or None, not {management!r}")
            if management.manager_ingress is not None and management.manager_ingress >= self.ports:
                raise ValueError(f"management: the manager's port {management.manager_ingress} is not one of the "
                                 f"{self.ports} ports")
        self.management = management
        for name, value in (("ethernet", ethernet), ("ipv6", ipv6), ("bounded_loss", bounded_loss)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False, not {value!r}")
        self.ethernet, self.ipv6 = ethernet, ipv6
        self.bounded_loss = bounded_loss and message_slots >= 2     # what the build has (its window is K/2)
        # the longest frame the switch takes or sends: a RoCE frame whose payload stream is max_frame bytes
        self.longest_frame = max_frame + MAX_HEADER_BYTES + ICRC_BYTES
        # a narrower port's whole-frame buffer, in core beats: two longest frames (one leaving, one arriving)
        self.whole_frames_beats = 2 * -(-self.longest_frame // (width // 8)) + 2
        self.egress_geometry = dict(queues=egress_queues, depth_beats=egress_buffer // self.beat_bytes,
                                    max_frame=self.longest_frame)
        try:
            check_geometry(width, cell_beats=None, **self.egress_geometry)
        except ValueError as error:
            raise ValueError(f"egress stage (egress_queues, egress_buffer): {error}") from None
        self.packet_beats = -(-mtu // self.beat_bytes)
        self.slots = jobs * message_slots * message_packets
        super().__init__({
            "s_axis": In(axi_stream_signature(self.port_width)).array(ports),
            "m_axis": Out(axi_stream_signature(self.port_width)).array(ports),
            "csr": In(csr_signature()),
            **({"ethernet_status": In(EthernetStatus).array(ports)} if ethernet else {}),
        })

    @property
    def parameters(self):
        return {"width": self.width, "workers": self.workers, "jobs": self.jobs, "dtype": self.dtype,
                "ftz": self.ftz, "mtu": self.mtu, "message_packets": self.message_packets,
                "message_slots": self.message_slots, "max_frame": self.max_frame,
                "adder_stages": self.adder_stages, "ports": self.ports,
                "forwarding_entries": self.forwarding_entries, "egress_queues": self.egress_queues,
                "egress_buffer": self.egress_buffer, "egress_weighted": self.egress_weighted,
                "management": None if self.management is None else dataclasses.asdict(self.management),
                "ethernet": self.ethernet, "port_width": self.port_width, "ipv6": self.ipv6,
                "bounded_loss": self.bounded_loss}

    def elaborate(self, platform):
        m = Module()
        W, N, J, S = self.width, self.workers, self.jobs, self.slots
        increment_bits = (N + 1).bit_length()
        # each port's egress stage (MLT's queues), whose configuration and status the registers hold
        egress = [EgressQueues(W, weighted=self.egress_weighted, **self.egress_geometry) for _ in range(self.ports)]

        # --- configuration: the registers (behind ``csr``, or the management agent's operations) -------------
        m.submodules.registers = regs = SwitchRegisters(jobs=J, workers=N, forwarding_entries=self.forwarding_entries,
                                                        mtu=self.mtu, increment_bits=increment_bits,
                                                        egress=egress[0],
                                                        ports=self.ports, ethernet=self.ethernet,
                                                        bounded_loss=self.bounded_loss)
        if self.management is not None:
            m.submodules.management = agent = ManagementAgent(W, self.management, self.ports)
            # the agent takes the register port for the clock of its operation
            owns = agent.owns_csr
            m.d.comb += [regs.csr.addr.eq(Mux(owns, agent.csr.addr, self.csr.addr)),
                         regs.csr.wdata.eq(Mux(owns, agent.csr.wdata, self.csr.wdata)),
                         regs.csr.we.eq(Mux(owns, agent.csr.we, self.csr.we)),
                         self.csr.rdata.eq(regs.csr.rdata), agent.csr.rdata.eq(regs.csr.rdata)]
        else:
            wiring.connect(m, wiring.flipped(self.csr), regs.csr)
        if self.ethernet:
            m.d.comb += [regs.ethernet_status[p].eq(self.ethernet_status[p]) for p in range(self.ports)]

        # --- in: the ports' whole frames, round robin, into the parser; each header's connection match ----------
        narrow = self.port_ratio > 1
        m.submodules.arbiter = arbiter = FrameArbiter(W, self.ports, stamp_bits=STAMP_BITS if narrow else 0)
        if narrow:      # the clock count that stamps each whole frame, for the arbiter's oldest first
            now = Signal(STAMP_BITS)
            m.d.sync += now.eq(now + 1)
        for p in range(self.ports):
            if not narrow:
                axis_to_frames(m, self.s_axis[p], arbiter.i[p])
            else:       # a narrower port: its beats widened, and each frame whole before the arbiter takes it
                m.submodules[f"widen_{p}"] = widen = WidenBeats(self.port_width, W)
                m.submodules[f"whole_{p}"] = whole = WholeFrames(W, self.whole_frames_beats,
                                                                 stamp_bits=STAMP_BITS)
                axis_to_frames(m, self.s_axis[p], widen.i)
                wiring.connect(m, widen.o, whole.i)
                wiring.connect(m, whole.o, arbiter.i[p])
                m.d.comb += [whole.now.eq(now), arbiter.stamp[p].eq(whole.head_stamp)]
        m.submodules.parser = parser = RoceParser(W, ipv6=self.ipv6)
        wiring.connect(m, arbiter.o, parser.i)
        # every header record waits in ``records`` for its frame's fate; the match, and from it the monitor, see
        # the fields they decide on
        m.submodules.records = records = HeaderRecords(store_entries=S * N, ipv6=self.ipv6)
        wiring.connect(m, parser.hdr, records.i)
        m.submodules.match = match = ConnectionMatch(jobs=J, workers=N, ports=self.ports, management=self.management,
                                                     header_clocks=-(-ETH_MIN_FRAME // (W // 8)))
        wiring.connect(m, records.o, match.header)
        wiring.connect(m, arbiter.frame_port, match.port)
        m.d.comb += [match.switch.eq(regs.switch), match.jobs.eq(regs.jobs),
                     match.connection_write.eq(regs.connection_write)]

        # --- the status monitor: each frame's fate and the state; descriptors, sum requests, bank writes --------
        m.submodules.monitor = monitor = StatusMonitor(
            width=W, workers=N, jobs=J, dtype=self.dtype, mtu=self.mtu, message_packets=self.message_packets,
            message_slots=self.message_slots, max_frame=self.max_frame, ports=self.ports,
            increment_bits=increment_bits, management=self.management, bounded_loss=self.bounded_loss)
        wiring.connect(m, match.o, monitor.frames)
        wiring.connect(m, parser.o, monitor.payload)
        m.d.comb += [
            # each frame's arrival (the clock its first beat went in), for the bounded-loss class's deadlines
            monitor.arrival.eq(arbiter.o.valid & arbiter.o.ready & arbiter.o.payload.first),
            monitor.jobs.eq(regs.jobs), monitor.connections.eq(regs.connections),
            monitor.job_enabled.eq(regs.job_enabled), monitor.connection_enabled.eq(regs.connection_enabled),
        ]
        if self.management is not None:
            wiring.connect(m, monitor.management_request, agent.request)

        # --- the sum: banks, adder tree, results --------------------------------------------------------------
        m.submodules.slots = slots = SlotMemory(width=W, workers=N, slots=S, packet_beats=self.packet_beats,
                                                fmt=self.dtype, ftz=self.ftz, adder_stages=self.adder_stages)
        wiring.connect(m, monitor.slot_write, slots.write[0])
        wiring.connect(m, monitor.sum_requests, slots.sum_request)

        # --- out: descriptors to frames (the emitter, with the packet ring of the frames that go on and the
        # header store of each contribution's header record and first 16 payload bytes), serialized ---------------
        m.submodules.emitter = emitter = Emitter(width=W, workers=N, jobs=J, message_slots=self.message_slots,
                                                 slots=S, packet_beats=self.packet_beats, max_frame=self.max_frame,
                                                 bounded_loss=self.bounded_loss)
        # (the emitter reads only words the monitor has committed, which the monitor writes again only after
        # the emitter's pointer has passed them: no word is read in the clock it is written)
        m.submodules.ring = ring = Memory(shape=emitter.StoredBeat, depth=1 << emitter.ring_bits, init=[],
                                          attrs=NO_COLLISION)
        # the header store in two memories, each with the one read port that reads it (a memory of whole
        # entries would be copied whole for each of its two read ports), in block RAM: the records (headers)
        # and the monitor (own bytes) write a slot's entries as it takes the slot's contributions, the emitter
        # reads them once the slot's sum is done and its headers are written (``stored``), and the slot is
        # taken again only once its results are sent (``UnsentResults``)
        m.submodules.header_store = header_store = Memory(shape=StoredHeader, depth=S * N, init=[],
                                                          attrs=IN_BLOCK_RAM)
        m.submodules.own_store = own_store = Memory(shape=8 * OWN_BYTES, depth=S * N, init=[], attrs=IN_BLOCK_RAM)
        wiring.connect(m, monitor.ring_write, ring.write_port())
        wiring.connect(m, records.store_write, header_store.write_port())
        wiring.connect(m, monitor.own_write, own_store.write_port())
        wiring.connect(m, monitor.descriptors, emitter.descriptors)
        wiring.connect(m, monitor.fates, records.fates)
        wiring.connect(m, records.headers, emitter.headers)
        m.d.comb += emitter.stored.eq(records.stored)
        m.submodules.ring_read = ring_read = BlockRAMReadPort(ring)
        wiring.connect(m, emitter.ring, ring_read)
        m.submodules.header_store_read = header_store_read = BlockRAMReadPort(header_store)
        m.submodules.own_store_read = own_store_read = BlockRAMReadPort(own_store)
        wiring.connect(m, emitter.store_header, header_store_read)
        wiring.connect(m, emitter.store_own, own_store_read)
        wiring.connect(m, emitter.results, slots.read[0])
        wiring.connect(m, slots.sum_done, emitter.sum_done)
        m.d.comb += [monitor.ring_read.eq(emitter.ring_read), emitter.sent.eq(monitor.sent),
                     emitter.sent_epochs.eq(monitor.sent_epochs), monitor.psn_used.eq(emitter.psn_used),
                     monitor.results_sent.eq(emitter.results_sent),
                     emitter.switch.eq(regs.switch), emitter.jobs.eq(regs.jobs),
                     emitter.connection_write.eq(regs.connection_write)]
        # (whole frames: no pause inside a frame out)
        m.submodules.deparser = deparser = RoceDeparser(W, whole_frames=True, ipv6=self.ipv6)
        wiring.connect(m, emitter.hdr, deparser.hdr)
        wiring.connect(m, emitter.payload, deparser.i)
        # every frame out of the deparser with its class (one entry per header record handed to the deparser,
        # in the same order), with the port it leaves by: looked up from the class's destination MAC on its way
        # to the queue
        m.submodules.forwarding = forwarding = ForwardingTable(ports=self.ports, entries=self.forwarding_entries)
        m.d.comb += [forwarding.entries.eq(regs.forwarding), forwarding.default_port.eq(regs.switch.default_port)]
        wiring.connect(m, emitter.classes, forwarding.i)
        m.submodules.frame_classes = frame_classes = SyncFIFOBuffered(width=FrameClass.size, depth=32)
        stream_to_fifo(m, forwarding.o, frame_classes)
        m.submodules.class_join = class_join = ClassJoin(W)
        wiring.connect(m, deparser.o, class_join.i)
        fifo_to_stream(m, frame_classes, class_join.classes)

        # --- to the ports: the management agent's replies join in, whole frames at a time; each frame to the
        # port its beats name (its destination MAC's; a reply's, its request's), through that port's egress stage ---
        # (into the router through two registers, ``to_router``: the egress stages' ``ready``, which the router
        # chooses by the frame's port, goes no further back in the clock than them)
        m.submodules.to_router = to_router = RegisterFIFO(width=EgressBeat(W).size)
        m.submodules.router = router = FrameRouter(W, self.ports, beat=EgressBeat(W))
        fifo_to_stream(m, to_router, router.i)
        m.d.comb += router.destination.eq(router.i.payload.port)
        if self.management is not None:
            m.submodules.replies = replies = FrameArbiter(W, 2, beat=EgressBeat(W), frame_ports=False)
            wiring.connect(m, class_join.o, replies.i[0])
            wiring.connect(m, agent.o, replies.i[1])
            stream_to_fifo(m, replies.o, to_router)
        else:
            stream_to_fifo(m, class_join.o, to_router)
        for p, stage in enumerate(egress):
            m.submodules[f"egress_{p}"] = stage
            wiring.connect(m, router.o[p], stage.i)
            if self.port_ratio == 1:
                frames_to_axis(m, stage.o, self.m_axis[p])
            else:
                m.submodules[f"narrow_{p}"] = narrow = NarrowBeats(W, self.port_width)
                wiring.connect(m, stage.o, narrow.i)
                frames_to_axis(m, narrow.o, self.m_axis[p])
            m.d.comb += [getattr(stage, name).eq(regs.egress[p][name]) for name in stage.config_layout.members]
            m.d.comb += [regs.egress_status[p][name].eq(getattr(stage, name)) for name in stage.STATUS]
            m.d.comb += stage.counter_read.eq(regs.egress_counter_read)

        # --- the counters: the monitor's, and the frames out (of the emitter and the management agent) -----------
        for name in COUNTERS:
            if name != "frames_out":
                m.d.comb += regs.increments[name].eq(monitor.increments[name])
        m.d.comb += regs.increments.frames_out.eq(emitter.frame_out + (agent.sent if self.management else 0))
        return m
