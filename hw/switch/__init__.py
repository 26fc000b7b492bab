"""The NetReduce switch as composed components, in the order a frame flows through them:

- ``hw.ports.FrameArbiter``: the P input ports into one pipeline, each frame's port noted;
- ``hw.parser.RoceParser``: header record, payload stream, verdicts;
- ``registers.SwitchRegisters``: the configuration and the counters behind the ``csr`` port;
- ``match.ConnectionMatch``: each header's connection and binding, from configuration only;
- ``top.NetReduceSwitch``: the status monitor, slots, emitter and credits (to be split further), and the
  composition;
- ``management.ManagementAgent``: the in-band control plane's register operations and replies (with a
  management address);
- ``hw.deparser.RoceDeparser``, ``hw.ports.FrameArbiter`` (the replies joining the frames out) and
  ``hw.ports.FrameRouter``: frames out of their ports.
"""

from .top import NetReduceSwitch

__all__ = ["NetReduceSwitch"]
