"""The NetReduce switch as composed components, in the order a frame flows through them:

- ``hw.ports.FrameArbiter``: the P input ports into one pipeline, each frame's port noted;
- ``hw.parser.RoceParser``: header record, payload stream, verdicts;
- ``registers.SwitchRegisters``: the configuration and the counters behind the ``csr`` port;
- ``records.HeaderRecords``: each frame's header record, held in frame order until the monitor's fate for the
  frame sends it on to the emitter, into the header store or nowhere;
- ``match.ConnectionMatch``: each header's connection and binding, from configuration only, with the fields
  the monitor decides on;
- ``monitor.StatusMonitor``: each frame's fate from its header, its match, the state and its payload; it owns
  every connection's, message's and packet slot's state and queues descriptors, sum requests and each frame's
  fate, in commit order. Its parts: ``requests.RequestDecoder`` (the requests of control and management
  packets), ``deadlines.Deadlines`` (the bounded-loss class's clock and deadlines), ``unsent.UnsentResults`` (each
  message's results not yet sent, which hold its release);
- ``hw.slots.SlotMemory``: the banks, the adder tree and the results;
- ``emitter.Emitter``: the monitor's descriptors, in order, to header records and payload streams (frames
  that go on, answers to duplicates, results, CREDIT frames);
- ``management.ManagementAgent``: the in-band control plane's register operations and replies (with a
  management address);
- ``top.NetReduceSwitch``: the composition, and nothing else;
- ``hw.deparser.RoceDeparser``, ``hw.ports.FrameArbiter`` (the replies joining the frames out) and
  ``hw.ports.FrameRouter`` with ``forwarding.ForwardingTable`` (the port of each destination MAC): frames
  out of their ports.
"""

from .top import NetReduceSwitch

__all__ = ["NetReduceSwitch"]
