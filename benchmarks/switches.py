"""The switches the synthesis benchmarks build, spelled once (``bench_switch.py`` builds them whole,
``bench_switch_parts.py`` takes them apart):

- the clock goal's (``goal_parameters``): 64 bits, 2 ports, 4 workers, 1 job, an 8-message window of 4-packet
  messages, MTU 1024, ``max_frame`` 2048, RoCE over IPv4 only as ``netreduce build`` builds it for a board,
  the bounded-loss class;
- the UltraScale+ figures' (``xilinx_parameters``): 8 workers, 1 job, the same window and MTU, ``max_frame``
  9216; the 512-bit core with 4 ports (512 bits, or narrower), or the Alveo card's top's switch
  (``netreduce.hw.alveo``: two 512-bit ports into the 1,024-bit core).

Each function returns ``NetReduceSwitch``'s keyword arguments; a caller's own override them.
"""

MTU, MESSAGE_PACKETS, SYNTH_MESSAGE_SLOTS = 1024, 4, 8


def goal_parameters(**overrides):
    return {"width": 64, "ports": 2, "workers": 4, "jobs": 1, "mtu": MTU, "message_packets": MESSAGE_PACKETS,
            "message_slots": SYNTH_MESSAGE_SLOTS, "max_frame": 2048, "ipv6": False, "bounded_loss": True,
            **overrides}


def xilinx_parameters(*, card=False, port_width=None, **overrides):
    """``card``: the Alveo top's switch; else the 512-bit core with 4 ports of ``port_width`` bits (512 by
    default)."""
    from netreduce.hw.alveo import CORE_WIDTH, WIDTH
    shape = {"width": CORE_WIDTH, "port_width": WIDTH, "ports": 2} if card else \
        {"width": 512, "port_width": port_width or 512, "ports": 4}
    return {**shape, "workers": 8, "jobs": 1, "mtu": MTU, "message_packets": MESSAGE_PACKETS,
            "message_slots": SYNTH_MESSAGE_SLOTS, "max_frame": 9216, **overrides}
