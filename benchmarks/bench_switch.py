"""Benchmarks of the NetReduce switch RTL; prints one JSON object.

    python benchmarks/bench_switch.py [--width 64 512] [--workers 8] [--bytes 65536] [--ports 1 2 4]
        [--narrow-ports 1 2 4] [--narrow-core 512 256] [--wide-core 1 2] [--card]
        [--synth [--synth-core 256] [--synth-message-packets M] [--synth-no-bounded-loss] [--no-route]
                 [--placer heap|static] [--router router2|router1] [--seed S ...] [--keep-routing]]
        [--xilinx [--xilinx-port-width 64 | --xilinx-card]]

- Sustained throughput: an all-reduce of ``--workers`` workers (binary32, MTU 1024, 4-packet messages,
  16 message slots, and by default 16 messages per worker, so that the whole tensor fits the credit
  window and the workers send it back to back) is run on the golden model, and what reached the switch
  is replayed into the generated Verilog (``tb/switch_tb.py``, testcase ``measure``) as fast as the switch
  takes it, each frame held back only until the switch has sent what the frame answers (its ACKs), the
  sink always ready: input beats per clock over the frames offered back to back, the clocks in which the
  switch refused a beat, and output beats per clock over the run (goal 1.0, line rate).
- The bounded-loss class: the same workers with a quarter of the bytes as MLT's one-packet messages (UC
  WRITE ONLY with immediate, MTU 1024, a window of 8 messages), no loss: the same figures
  (``bounded_loss``).
- Ports (``ports``): the same all-reduce with the workers spread over P ports (worker w on port w mod P;
  ``--ports``, default P = 1, 2, 4 at 64 bits and 1, 2 at 512), every port's frames offered at once and
  taken in the order of the switch's port arbiter: input and output beats per clock in aggregate and per
  port (each port's frames out are checked against the model's, in any order). The switch takes its
  ports into one pipeline of one beat per clock, so the aggregate is one port's line rate, shared.
- Forwarded frames: back-to-back frames that the switch only forwards (not RoCE, 60 and 128 bytes; RoCE
  of no registered connection, 60 bytes), input and output beats per clock and refused clocks for each
  kind (goal 1.0: a frame of no connection takes no clock of its own in the monitor).
- Smallest frames on every port (``ports_smallest``): for each P of ``ports`` above 1, every port offers
  back-to-back 60-byte frames that the switch only forwards (not RoCE: 8 beats at 64 bits, 1 at 512),
  port p's to a host on port p + 1 (mod P), all ports at once: input and output beats per clock in
  aggregate and per port.
- Ports narrower than the core (``64b_ports_512b_core``; ``--narrow-ports``, default P = 1, 2, 4): 64-bit ports into
  the 512-bit core (``NetReduceSwitch(port_width=64, width=512)``, ``hw.gearbox``), the all-reduce over P ports, the
  smallest frames on every port (P > 1), back-to-back ACKs of the connections on every port at once, each on its
  responder's port (``acks``): the same figures, in the ports' beats (no bounded-loss run here: the egress
  stages drop results by class, ``measure_narrow_ports``). ``--narrow-core 256``: the same into the 256-bit
  core (``64b_ports_256b_core``; P <= 2 there, where the core is at least twice the ports' bits together);
  without ``--narrow-core`` the 512-bit core, and no run at all if ``--width`` names none.
- 512-bit ports into a 1,024-bit core (``512b_ports_1024b_core``; ``--wide-core``, default none: P = 1, 2):
  ``NetReduceSwitch(port_width=512, width=1024)`` (frames of an even number of port beats at line rate on
  every port at once, of an odd number b at b/(b + 1) of it, frames of one at one a clock in all); the same
  figures as for the 64-bit ports above, in the ports' beats, and the bounded-loss class's all-reduce over P
  ports (``bounded_loss``).
- The card (``card_512b_ports_1024b_core_100g``; ``--card``): the Alveo top's switch (two 512-bit ports into the
  1,024-bit core) with each port's frames at the pace of a 100 Gb/s line into its 250 MHz clock (400 bits a clock;
  ``tb.harness.Player``'s line pace: a frame no sooner than the line has carried the frames before it, with their
  FCS, preamble and gap), both ports at once: the all-reduce, back-to-back frames of no connection of 60 to 1,500
  bytes, back-to-back ACKs, the bounded-loss class's all-reduce. Each port's ``line_backlog_bytes`` (max and last):
  how far its line got ahead of what the switch took, the bytes its receive buffer (``receive_buffer_bytes``) would
  hold; a backlog that grows with the run is a line the switch does not keep up with.
- ACKs on every port (``ports_acks``): for each P of ``ports``, back-to-back ACKs of the connections into
  every port at once, each on its responder's port (as ``acks`` above; with one port, one after another).
- Latency: clocks from the last beat of the contribution that fills a slot to the first beat of its first
  result (min, median, max over the run; the median includes queueing behind earlier output).
- Slot memory: bits per worker per packet slot (bank words, header store entry, its share of the
  double-buffered result memory).
- RTL simulation speed: frames in and out per second of wall time (Verilator through cocotb; the build
  is compiled with g++ -O2 unless ``NETREDUCE_VERILATOR_CXX_OPT`` says otherwise, where the tests use
  -O0 for short builds).
- With ``--synth``: LUTs, flip-flops, block RAMs and Fmax of a 64-bit, 2-port, 4-worker, 1-job build on
  the ECP5-85 (speed grade 8), RoCE over IPv4 only as ``netreduce build`` builds it for a board, against
  the 156.25 MHz goal (the switch the issue sets that goal for, and ``bench_switch_parts.py`` takes apart;
  with the bounded-loss class unless ``--synth-no-bounded-loss``).
  That build has an 8-message credit window (``switches.SYNTH_MESSAGE_SLOTS``): with the 16 of the throughput runs,
  its slot, result and header memories take more DP16KD block RAMs than the 208 of the device (262 with
  IPv6, Yosys ``synth_ecp5``). With
  ``--no-route`` nextpnr stops after placement and the Fmax is its estimate. Routed with router2 (the default),
  a router that does not converge is stopped as ``netreduce build`` stops it, and the build placed and routed
  again with the next seed of ``--seed`` (default 1): the JSON names the seed that routed (``seed``) and why each
  other was given up on (``not_routed``), and where none routed, ``routed`` is false and the Fmax the placer's
  estimate (``--keep-routing``: router2 goes on however long it takes). ``deepest`` lists the ten deepest
  register inputs in logic levels (``netreduce.synth.logic_depths``: a LUT4 is one level), the paths
  to shorten next. ``--width`` with no width runs the synthesis alone. ``--synth-core 256``: the same two
  64-bit ports into the 256-bit core (``ecp5_switch_64b_2p_4w_256b_core``), where both are at line rate at
  once; it does not fit the device (214 DP16KD, docs/ARCHITECTURE.md, "Ports narrower than the core").
  ``--synth-message-packets 1``: the same build with one-packet messages (8 packet slots instead of 32).
- With ``--xilinx``: Yosys ``synth_xilinx -family xcup`` cell counts of the 512-bit switch with 4 ports and
  8 workers (1 job, the same 8-message window) against the Alveo U280's XCU280, and its ten deepest
  register inputs in logic levels (a LUT6 is one level). An estimate: no place and route, no timing.
  ``--xilinx-port-width 64``: the same core with 64-bit ports (every port at line rate at once).
  ``--xilinx-card``: instead, the switch of the card's top (``netreduce.hw.alveo``): its two 512-bit ports into
  the 1,024-bit core.
"""

import argparse
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

from switches import MESSAGE_PACKETS, MTU, goal_parameters, xilinx_parameters

from netreduce.host.network import CLOCK_NS, ModelEngine, build_allreduce, record_frames
from netreduce.host.packets import build_ack, build_roce_frame
from netreduce.hw.switch import NetReduceSwitch
from netreduce.hw.switch.emitter import HeaderEntry
from netreduce.tb.harness import run_switch

MESSAGE_SLOTS = 16
FORWARDED_FRAMES = 400
LINE_GBPS, CARD_MHZ = 100, 250      # ``--card``: the Alveo's QSFP28 lines, its switch's clock (``SwitchOnAlveo``)
CARD_FRAME_SIZES = (60, 128, 256, 260, 576, 1024, 1500)
CARD_FRAMES = 3000
WINDOW_BYTES = MESSAGE_SLOTS * (MESSAGE_PACKETS * MTU - 16)      # a worker's bytes in the credit window
PORT_COUNTS = {64: [1, 2, 4], 512: [1, 2]}      # the multi-port runs of each width


def scenario(workers, nbytes, width, **kwargs):
    network, _, _ = build_allreduce(workers=workers, nbytes=nbytes, mtu=MTU, message_packets=MESSAGE_PACKETS,
                                    message_slots=MESSAGE_SLOTS, width=width,
                                    engine=lambda config: ModelEngine(config, record=True,
                                                                      clock_ns=CLOCK_NS[width]), **kwargs)
    assert network.run() == "done"
    return network.engine.recording()


def forwarded_scenarios(workers, width):
    """Scenarios of back-to-back frames of one kind each, sent to worker 0's host: ``{kind: scenario}``."""
    network, _, _ = build_allreduce(workers=workers, nbytes=64, mtu=MTU, message_packets=MESSAGE_PACKETS,
                                    message_slots=MESSAGE_SLOTS, width=width)
    config = network.switch_config
    host = network.hosts[0].address
    kinds = {"plain_60": forwarded_frame(60, 9, host), "plain_128": forwarded_frame(128, 9, host),
             "roce_unregistered_60": forwarded_frame(60, 4791, host)}
    return {kind: record_frames(config, [frame] * FORWARDED_FRAMES) for kind, frame in kinds.items()}


def forwarded_frame(size, dport, to):
    """A SEND ONLY of ``size`` bytes in all to host address ``to``, from an address of no connection; RoCE
    if ``dport`` is 4791."""
    return build_roce_frame(0x04, bytes(max(0, size - 58)), pad=0, dport=dport, eth_dst=to.mac,
                            src_ip="10.1.0.1", dst_ip=to.ip, dest_qp=0x77)


def frames_on_every_port(workers, width, ports, size=60, count=FORWARDED_FRAMES):
    """Back-to-back frames of ``size`` bytes (60: the smallest) of no connection, ``count`` into every one of
    ``ports`` ports at once, port p's to a host on port p + 1 (mod P): a recording for ``run_measure(...,
    ports_at_once=True)``."""
    network, _, _ = build_allreduce(workers=workers, nbytes=64, mtu=MTU, message_packets=MESSAGE_PACKETS,
                                    message_slots=MESSAGE_SLOTS, width=width, ports=ports)
    on_port = {host.port: host.address for host in reversed(network.hosts)}    # the first host of each port
    frames, into = [], []
    for _ in range(count):
        for p in range(ports):
            frames.append(forwarded_frame(size, 9, on_port[(p + 1) % ports]))
            into.append(p)
    assert all(len(frame) == size for frame in frames)
    return record_frames(network.switch_config, frames, ports=into)


def acks_on_every_port(workers, width, ports, count=FORWARDED_FRAMES):
    """Back-to-back ACKs of registered connections, ``count`` into every one of ``ports`` ports at once, each on its
    connection's responder port, bound to it (PSN one before its first: it delivers nothing new, and the
    switch forwards it after its lookup): a recording for ``run_measure(..., ports_at_once=True)``."""
    network, _, _ = build_allreduce(workers=workers, nbytes=64, mtu=MTU, message_packets=MESSAGE_PACKETS,
                                    message_slots=MESSAGE_SLOTS, width=width, ports=ports)
    by_port = {p: [c for c in network.switch_config.connections if c.responder_port == p] for p in range(ports)}
    assert all(by_port.values()), "a port with no connection's responder"
    frames, into = [], []
    for n in range(count):
        for p in range(ports):
            conn = by_port[p][n % len(by_port[p])]
            frames.append(build_ack((conn.start_psn - 1) % (1 << 24), 1, eth_src=conn.responder_mac,
                                    eth_dst=conn.requester_mac, src_ip=conn.responder_ip, dst_ip=conn.requester_ip,
                                    dest_qp=conn.requester_qpn, vlan=conn.responder_vlan))
            into.append(p)
    return record_frames(network.switch_config, frames, ports=into)


def run_measure(switch, scenario, workers, ports_at_once=False, line_rate=0):
    """The testbench's ``measure`` on ``scenario`` (each port's frames at the pace of a line of ``line_rate``
    bits a clock, if given): its JSON result."""
    with tempfile.TemporaryDirectory() as scratch:
        path, out = Path(scratch) / "scenario.pickle", Path(scratch) / "result.json"
        path.write_bytes(pickle.dumps(scenario))
        run_switch(switch, testcase="measure", quiet=True,
                   params={"scenario": str(path), "out": str(out), "workers": workers,
                           "ports_at_once": ports_at_once, "line_rate": line_rate})
        return json.loads(out.read_text())


def slot_memory_bits(switch):
    """Bits the switch holds per worker per packet slot."""
    bank = switch.packet_beats * switch.width
    header = HeaderEntry.size        # a contribution's stored header and its own 16 bytes
    results = 2 * switch.packet_beats * switch.width / switch.workers
    return {"bank": bank, "header_store": header, "result_share": round(results),
            "total": round(bank + header + results)}


def measure_ports(width, workers, nbytes, ports):
    """The sustained all-reduce with the workers spread over ``ports`` ports (worker w on port w mod P), every
    port's frames offered at once (the arbiter takes them in its order): aggregate and per-port rates."""
    switch = NetReduceSwitch(width=width, workers=workers, jobs=1, ports=ports, mtu=MTU,
                             message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS)
    return port_figures(run_measure(switch, scenario(workers, nbytes, width, ports=ports), workers,
                                    ports_at_once=True))


def port_figures(figures):
    """What the ``ports`` report keeps of a run's figures."""
    return {"input_beats_per_clock": figures["input_beats_per_clock"],
            "output_beats_per_clock": figures["output_beats_per_clock"],
            "input_refused_clocks": figures["input_refused_clocks"], "per_port": figures["ports"]}


def measure(width, workers, nbytes, ports):
    switch = NetReduceSwitch(width=width, workers=workers, jobs=1, mtu=MTU, message_packets=MESSAGE_PACKETS,
                             message_slots=MESSAGE_SLOTS)
    result = run_measure(switch, scenario(workers, nbytes, width), workers)
    result["slot_memory_bits_per_worker_per_packet"] = slot_memory_bits(switch)
    # the bounded-loss class: one-packet messages, a window of K/2, no loss (no deadline fires)
    figures = run_measure(switch, scenario(workers, nbytes // 4, width, traffic_class="lossy"), workers)
    result["bounded_loss"] = {name: figures[name] for name in (
        "frames_in", "input_beats_per_clock", "input_refused_clocks", "output_beats_per_clock",
        "result_latency_clocks")}
    result["forwarded"] = {}
    for kind, frames in forwarded_scenarios(workers, width).items():
        figures = run_measure(switch, frames, workers)
        result["forwarded"][kind] = {name: figures[name] for name in (
            "input_beats_per_clock", "input_refused_clocks", "output_beats_per_clock")}
    # (one port: the run above, the same build and scenario)
    result["ports"] = {count: port_figures(result) if count == 1 else measure_ports(width, workers, nbytes, count)
                       for count in ports}
    result["ports_smallest"] = {count: measure_smallest(width, workers, count) for count in ports if count > 1}
    result["ports_acks"] = {count: measure_acks(width, workers, count) for count in ports}
    return result


def measure_acks(width, workers, ports):
    """``acks_on_every_port`` through the ``ports``-port switch: aggregate and per-port rates."""
    switch = NetReduceSwitch(width=width, workers=workers, jobs=1, ports=ports, mtu=MTU,
                             message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS)
    return port_figures(run_measure(switch, acks_on_every_port(workers, width, ports), workers, ports_at_once=True))


def measure_narrow_ports(port_width, width, workers, nbytes, ports, *, bounded_loss=False):
    """Ports of ``port_width`` bits into the core of ``width`` bits (``hw.gearbox``): the sustained all-reduce
    with the workers spread over the ports, the smallest frames on every port (as ``ports`` and
    ``ports_smallest`` measure them), back-to-back ACKs of the connections on every port (``acks``), and with
    ``bounded_loss`` the bounded-loss class's all-reduce over the ports (as ``bounded_loss`` measures it on one
    port); beats are the ports' beats.

    The bounded-loss run is for the 1,024-bit core of 512-bit ports only: a core 8 times the ports' width
    (64-bit ports into the 512-bit core) sends a message's results 8 times faster than a port takes them, so
    the egress stages drop bounded-loss results by class (MLT's admission, as built: at P = 1 and 2, 103 and
    70 of 272 frames), which a replay of the model's timeless recording cannot hold (the testbench's
    ``timed_against_model`` holds that run to the model at the switch's arrivals, drops and all)."""
    switch = NetReduceSwitch(width=width, port_width=port_width, workers=workers, jobs=1, ports=ports, mtu=MTU,
                             message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS)
    result = {"allreduce": port_figures(run_measure(switch, scenario(workers, nbytes, port_width, ports=ports),
                                                    workers, ports_at_once=True))}
    if ports > 1:
        result["smallest"] = port_figures(run_measure(switch, frames_on_every_port(workers, port_width,
                                                                                            ports),
                                                      workers, ports_at_once=True))
    result["acks"] = port_figures(run_measure(switch, acks_on_every_port(workers, port_width, ports), workers,
                                              ports_at_once=True))
    if bounded_loss:
        result["bounded_loss"] = port_figures(run_measure(
            switch, scenario(workers, nbytes // 4, port_width, ports=ports, traffic_class="lossy"), workers,
            ports_at_once=True))
    return result


def measure_card(workers, nbytes):
    """The Alveo top's switch (``netreduce.hw.alveo``: two 512-bit ports into the 1,024-bit core) at the card's
    clocks: each port's frames at the pace of a 100 Gb/s line (``LINE_GBPS``) into the switch's clock of
    ``CARD_MHZ``, both ports at once; the all-reduce of ``workers`` over the two ports, ``CARD_FRAMES`` back-to-back
    frames of no connection of each of ``CARD_FRAME_SIZES`` bytes into each port, as many back-to-back ACKs, and the
    bounded-loss class's all-reduce over the two ports. Each port's ``line_backlog_bytes`` is what its receive
    ``FrameFilter`` would have held; it holds ``receive_buffer_bytes`` and drops whole frames beyond. (The switch's
    own whole-frame buffers, two of its longest frames a port, take what its core does not keep up with first:
    ``CARD_FRAMES`` are enough to fill them, so that a line the core does not keep up with shows as a backlog that
    grows with the run.)"""
    from netreduce.hw.alveo import CORE_WIDTH, WIDTH, filter_beats
    line_rate = round(LINE_GBPS * 1000 / CARD_MHZ)
    switch = NetReduceSwitch(width=CORE_WIDTH, port_width=WIDTH, workers=workers, jobs=1, ports=2, mtu=MTU,
                             message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS)

    def paced(recording):
        return port_figures(run_measure(switch, recording, workers, ports_at_once=True, line_rate=line_rate))

    result = {"line_gbps": LINE_GBPS, "switch_mhz": CARD_MHZ, "line_bits_per_clock": line_rate,
              "receive_buffer_bytes": filter_beats(switch) * WIDTH // 8,
              "allreduce": paced(scenario(workers, nbytes, WIDTH, ports=2))}
    for size in CARD_FRAME_SIZES:
        result[f"plain_{size}"] = paced(frames_on_every_port(workers, WIDTH, 2, size, CARD_FRAMES))
    result["acks"] = paced(acks_on_every_port(workers, WIDTH, 2, CARD_FRAMES))
    result["bounded_loss"] = paced(scenario(workers, nbytes // 4, WIDTH, ports=2, traffic_class="lossy"))
    return result


def measure_smallest(width, workers, ports):
    """``frames_on_every_port`` through the ``ports``-port switch: aggregate and per-port rates."""
    switch = NetReduceSwitch(width=width, workers=workers, jobs=1, ports=ports, mtu=MTU,
                             message_packets=MESSAGE_PACKETS, message_slots=MESSAGE_SLOTS)
    return port_figures(run_measure(switch, frames_on_every_port(workers, width, ports), workers,
                                    ports_at_once=True))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, nargs="*", default=[64, 512], choices=(64, 512),
                        help="widths of the throughput runs (none: only --synth)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--bytes", type=int, default=WINDOW_BYTES, help="gradient bytes per worker")
    parser.add_argument("--ports", type=int, nargs="*", choices=(1, 2, 3, 4),
                        help="port counts of the multi-port runs (default 1 2 4 at 64 bits, 1 2 at 512; none: skip)")
    parser.add_argument("--narrow-ports", type=int, nargs="*", default=[1, 2, 4], choices=(1, 2, 3, 4),
                        help="port counts of the runs with 64-bit ports into a wider core (--narrow-core; none: skip)")
    parser.add_argument("--narrow-core", type=int, nargs="+", choices=(256, 512),
                        help="the cores of the --narrow-ports runs (default 512, if --width names a width)")
    parser.add_argument("--wide-core", type=int, nargs="*", default=[], choices=(1, 2),
                        help="port counts of the runs with 512-bit ports into a 1,024-bit core (default: none)")
    parser.add_argument("--card", action="store_true",
                        help="also the Alveo top's switch with each port at the pace of a 100 Gb/s line")
    parser.add_argument("--synth", action="store_true", help="also place and route a 64-bit, 4-worker build")
    parser.add_argument("--synth-core", type=int, choices=(64, 256), default=64,
                        help="with --synth: the core behind the two 64-bit ports (256: both at line rate at once)")
    parser.add_argument("--xilinx", action="store_true",
                        help="also synthesize the 512-bit, 4-port, 8-worker switch for UltraScale+ (Yosys)")
    parser.add_argument("--xilinx-port-width", type=int, choices=(64, 512), default=512,
                        help="with --xilinx: the ports' width (64: every port at line rate into the 512-bit core)")
    parser.add_argument("--xilinx-card", action="store_true",
                        help="with --xilinx: the Alveo top's switch instead, two 512-bit ports into the 1,024-bit core")
    parser.add_argument("--synth-message-packets", type=int, default=MESSAGE_PACKETS,
                        help="with --synth: a message's packets (default: the throughput runs' 4)")
    parser.add_argument("--synth-no-bounded-loss", action="store_true",
                        help="with --synth: the switch without the bounded-loss class")
    parser.add_argument("--placer", choices=("heap", "static"), default="heap", help="with --synth: nextpnr's placer")
    parser.add_argument("--router", choices=("router1", "router2"), default="router2",
                        help="with --synth: nextpnr's router")
    parser.add_argument("--seed", type=int, nargs="+", default=[1],
                        help="with --synth: nextpnr's placement seeds, the next tried where router2 does not converge")
    parser.add_argument("--keep-routing", action="store_true",
                        help="with --synth: let router2 go on when its overused wires stop falling")
    parser.add_argument("--no-route", action="store_true",
                        help="with --synth: stop after placement and report nextpnr's estimated Fmax")
    args = parser.parse_args(argv)
    os.environ.setdefault("NETREDUCE_VERILATOR_CXX_OPT", "-O2")
    report = {"mtu": MTU, "workers": args.workers, "bytes_per_worker": args.bytes}
    for width in args.width:
        ports = args.ports if args.ports is not None else PORT_COUNTS[width]
        report[f"{width}b"] = measure(width, args.workers, args.bytes, ports)
        print(f"{width}b: done", file=sys.stderr)
    cores = (args.narrow_core or ([512] if args.width else [])) if args.narrow_ports else []
    for core in cores:
        report[f"64b_ports_{core}b_core"] = {count: measure_narrow_ports(64, core, args.workers, args.bytes, count)
                                             for count in args.narrow_ports}
        print(f"64-bit ports into the {core}-bit core: done", file=sys.stderr)
    if args.wide_core:
        report["512b_ports_1024b_core"] = {count: measure_narrow_ports(512, 1024, args.workers, args.bytes, count,
                                                                       bounded_loss=True)
                                           for count in args.wide_core}
        print("512-bit ports into the 1,024-bit core: done", file=sys.stderr)
    if args.card:
        report["card_512b_ports_1024b_core_100g"] = measure_card(args.workers, args.bytes)
        print("the card's switch at 100 Gb/s a port: done", file=sys.stderr)
    if args.synth:
        from netreduce.synth import synth_ecp5
        # RoCE over IPv4 only, as ``netreduce build`` builds the switch for an ECP5 board (with IPv6 its
        # 968-bit header records take 209 DP16KD of the device's 208)
        core = args.synth_core
        switch = NetReduceSwitch(**goal_parameters(width=core, port_width=64,
                                                   message_packets=args.synth_message_packets,
                                                   bounded_loss=not args.synth_no_bounded_loss))
        packets = args.synth_message_packets
        name = "netreduce_switch_64b_2p_4w" + ("" if core == 64 else f"_{core}b_core") + \
            ("" if packets == MESSAGE_PACKETS else f"_{packets}_packet_messages") + \
            ("_no_bounded_loss" if args.synth_no_bounded_loss else "")
        result = synth_ecp5(switch, name, freq_mhz=156.25, route=not args.no_route, placer=args.placer,
                            router=args.router, seeds=args.seed, watch=not args.keep_routing)
        result.pop("work_dir", None)
        report[name.replace("netreduce_switch", "ecp5_switch")] = result
    if args.xilinx:
        from netreduce.synth import synth_xilinx_estimate
        parameters = xilinx_parameters(card=args.xilinx_card, port_width=args.xilinx_port_width)
        switch = NetReduceSwitch(**parameters)
        core, ports, port_width = parameters["width"], parameters["ports"], parameters["port_width"]
        name = f"netreduce_switch_{core}b_{ports}p_8w" + ("" if port_width == core else f"_{port_width}b_ports")
        result = synth_xilinx_estimate(switch, name, family="xcup", depths=True)
        result.pop("work_dir", None)
        result.pop("cells", None)
        device = "XCU280 (1,303,680 LUTs, 2,607,360 flip-flops, 2,016 RAMB36, 960 URAM, 9,024 DSP)"
        report[name.replace("netreduce_switch", "xcup_switch")] = {**result, "device": device}
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
