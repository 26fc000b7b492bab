"""``netreduce configure``: load a switch's configuration and read its counters through its in-band control
plane (docs/ARCHITECTURE.md, "In-band control plane"), as its manager: every register write of the
configuration in ``--config FILE.json`` and, with ``--counters``, a read of every counter, one request at
a time, each sent again when its reply does not come. The switch is

- on a network interface (``--interface IFACE``: raw Ethernet, which needs the privilege to open a packet
  socket; the manager's MAC defaults to the interface's),
- the golden model of the build the options describe (``--model``: what that switch would answer), or
- nobody: ``--pcap FILE`` writes the requests to a capture instead of sending them.

The build options (``--workers``, ``--jobs``, ``--ports`` ...) and the management address must be those the
switch was built with (``netreduce generate`` or ``build``). The configuration file holds a JSON object::

    {"switch": {"mac": "02:4e:52:00:00:01", "ip": "10.0.255.1", "control_port": 4792, "default_port": 0},
     "forwarding": {"02:00:00:00:00:01": 0, "02:00:00:00:00:02": 1},
     "jobs": [{"job": 7, "workers": 2, "mtu": 1024, "start_msg": 0}],
     "connections": [{"job": 7, "worker": 0, "requester_mac": "02:00:00:00:00:01", "requester_ip": "10.0.0.1",
                      "requester_qpn": 256, "requester_port": 0, "responder_mac": "02:00:00:00:00:02",
                      "responder_ip": "10.0.0.2", "responder_qpn": 257, "responder_port": 1, "start_psn": 0}, ...]}

(``switch`` and ``forwarding`` may be left out; a connection's ``requester_vlan`` and ``responder_vlan`` are
VLAN ids, untagged when left out.) Prints one JSON object: the requests, the requests sent again, and with
``--counters`` every counter (``counters``) and, for a board's switch (``--ethernet``), each port's MAC
counters (``ethernet``, a list by port).
"""

import json
import select
import sys
import time
from pathlib import Path

from ..cli import UserError
from .generate import add_switch_arguments, switch_arguments

__all__ = ["register", "run", "load_config"]


def register(subparsers):
    parser = subparsers.add_parser("configure", help="configure a switch and read its counters in-band",
                                   description=__doc__.split("::")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--interface", metavar="IFACE", help="send the requests on this network interface")
    target.add_argument("--model", action="store_true", help="send them to the golden model of the build")
    target.add_argument("--pcap", metavar="FILE", help="write them to a capture, sending nothing")
    parser.add_argument("--config", metavar="FILE.json", help="the configuration to load (module documentation)")
    parser.add_argument("--counters", action="store_true", help="read every counter afterwards")
    parser.add_argument("--ethernet", action="store_true",
                        help="a board's switch (netreduce build): --counters also reads each port's Ethernet MAC "
                             "counters (the golden model has no MAC: they read 0 there)")
    parser.add_argument("--timeout-ms", type=float, default=100.0, metavar="T", help="wait for each reply (100)")
    parser.add_argument("--retries", type=int, default=3, help="send a request again this often (3)")
    parser.add_argument("--width", type=int, choices=(64, 512), default=64, help="datapath width of the build")
    add_switch_arguments(parser)
    parser.set_defaults(func=run)


def load_config(path, args):
    """The ``SwitchConfig`` in the JSON file ``path`` for the build of ``args``."""
    from ..sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig
    try:
        text = json.loads(Path(path).read_text())
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path} is not JSON: {error}") from None
    try:
        switch = text.get("switch", {})
        jobs = [JobConfig(job=job["job"], workers=job["workers"], mtu=job.get("mtu", args.mtu),
                          start_msg=job.get("start_msg", 0), dtype=args.dtype, ftz=args.ftz,
                          message_packets=args.message_packets, message_slots=args.message_slots)
                for job in text.get("jobs", [])]
        connections = [ConnectionConfig(**conn) for conn in text.get("connections", [])]
        config = SwitchConfig(mac=switch.get("mac", "02:4e:52:00:00:01"), ip=switch.get("ip", "10.0.255.1"),
                              **({"control_port": switch["control_port"]} if "control_port" in switch else {}),
                              default_port=switch.get("default_port", 0), ports=args.ports,
                              forwarding=text.get("forwarding", {}), max_frame=args.max_frame, jobs=jobs,
                              connections=connections)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UserError(f"{path}: not a switch configuration ({error!r})") from None
    for what, count, most in (("jobs", len(jobs), args.jobs), ("forwarding entries", len(config.forwarding),
                                                                  args.forwarding_entries),
                              ("workers in a job", max((job.workers for job in jobs), default=0), args.workers)):
        if count > most:
            raise UserError(f"{path}: {count} {what}, more than the build's {most}")
    return config


def _interface_exchange(interface, address, timeout):
    """Send a frame on ``interface``; the frames received until a reply from the switch of ``address`` to its
    manager arrives or ``timeout`` seconds pass."""
    from scapy.config import conf

    from ..host.management import parse_management_reply
    try:
        sock = conf.L2socket(iface=interface)
    except (OSError, PermissionError) as error:
        raise UserError(f"cannot open {interface} for raw Ethernet: {error}") from None

    def exchange(frame):
        sock.send(frame)
        got, deadline = [], time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([sock], [], [], left)[0]:
                break
            packet = sock.recv()
            if packet is None:
                continue
            got.append(bytes(packet))
            if parse_management_reply(got[-1], address) is not None:
                break
        return got
    return exchange


def run(args):
    from ..host.management import ManagementError, Manager
    from ..host.pcap import write_pcap
    from ..registers import COUNTERS, ETHERNET_COUNTERS, address, counter_address, switch_config_writes
    from ..wire import ManagementOp
    if args.interface and args.manager_mac is None:
        try:
            from scapy.arch import get_if_hwaddr
            args.manager_mac = get_if_hwaddr(args.interface)
        except (OSError, ValueError) as error:
            raise UserError(f"no MAC for {args.interface} ({error}): give --manager-mac") from None
    if args.manager_ip is None:
        raise UserError("give --manager-ip (the manager's IPv4 address, as the switch was built with)")
    if args.manager_mac is None:
        raise UserError("give --manager-mac (the manager's MAC, as the switch was built with)")
    if args.config is None and not args.counters:
        raise UserError("nothing to do: give --config FILE.json and/or --counters")
    from ..hw.switch import NetReduceSwitch
    try:
        switch = NetReduceSwitch(width=args.width, ports=args.ports, ethernet=args.ethernet, **switch_arguments(args))
    except ValueError as error:
        raise UserError(str(error)) from None
    switch._MustUse__silence = True                 # described, not built
    management = switch.management
    writes = switch_config_writes(load_config(args.config, args), args.workers) if args.config else []
    # (where the value goes: "counters" and a name, or a port and a name; the word address)
    reads = [(("counters", name), counter_address(name)) for name in COUNTERS] if args.counters else []
    if args.counters and args.ethernet:
        reads += [((p, name), address("ethernet", p, name)) for p in range(args.ports) for name in ETHERNET_COUNTERS]

    report = {"target": "pcap" if args.pcap else "model" if args.model else args.interface,
              "management": {"switch_mac": args.management_mac, "switch_ip": args.management_ip,
                             "manager_mac": args.manager_mac, "manager_ip": args.manager_ip,
                             "manager_port": args.manager_port}}
    if args.pcap:
        manager = Manager(management)
        frames = [manager.request(ManagementOp.WRITE, at, word)[1] for at, word in writes]
        frames += [manager.request(ManagementOp.READ, at)[1] for _, at in reads]
        write_pcap(args.pcap, frames)
        print(json.dumps({**report, "requests": len(frames), "pcap": args.pcap}, indent=1))
        return 0
    if args.model:
        from ..sim.switch_model import SwitchModel
        model = SwitchModel.managed(switch.parameters, management)
        port = management.manager_ingress or 0

        def exchange(frame):
            return [out for _, out in model.receive(port, frame)]
    else:
        exchange = _interface_exchange(args.interface, management, args.timeout_ms / 1000)
    manager = Manager(management, exchange, retries=args.retries)
    counters, ethernet = {}, [{} for _ in range(args.ports)]
    try:
        manager.load(writes)
        for (where, name), at in reads:
            (counters if where == "counters" else ethernet[where])[name] = manager.read(at)
    except ManagementError as error:
        raise UserError(str(error)) from None
    requests = len(writes) + len(reads)
    report.update(requests=requests, sent_again=manager.sent - requests)
    if args.counters:
        report["counters"] = counters
        if args.ethernet:
            report["ethernet"] = ethernet
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0

