"""The NetReduce switch as composed components, in the order a frame flows through them:

- ``hw.ports.FrameArbiter``: the P input ports into one pipeline, each frame's port noted;
- ``deadlines.Deadlines``: the switch's clock, each frame's arrival, and the bounded-loss messages whose
  deadline has come;
- ``hw.parser.RoceParser``: header record, payload stream, verdicts;
- ``registers.SwitchRegisters``: the configuration and the counters behind the ``csr`` port;
- ``match.ConnectionMatch``: each header's connection and binding, from configuration only;
- ``top.NetReduceSwitch``: the status monitor, slots and credits (to be split further), and the
  composition; ``requests.RequestDecoder`` reads the requests of control and management packets for it;
- ``unsent.UnsentResults``: each message's results not yet sent, which hold its release;
- ``emitter.Emitter``: the monitor's descriptors, in order, to header records and payload streams (frames
  that go on, answers to duplicates, results, CREDIT frames);
- ``management.ManagementAgent``: the in-band control plane's register operations and replies (with a
  management address);
- ``hw.deparser.RoceDeparser``, ``hw.ports.FrameArbiter`` (the replies joining the frames out) and
  ``hw.ports.FrameRouter`` with ``forwarding.ForwardingTable`` (the port of each destination MAC): frames
  out of their ports.
"""

from .top import NetReduceSwitch

__all__ = ["NetReduceSwitch"]
