"""amaranth.sim unit test of hw/switch/requests.py (``RequestDecoder``) against the host library: control
packets as ``build_control_frame`` makes them (tagged and untagged, every type) and management packets as
``build_management_frame`` makes them (writes, reads, replies) decode to the fields they were built with;
a request cut short (the frame, or the UDP length), a wrong magic, version, type or op is not a request."""

import random

from amaranth.sim import Simulator

from netreduce.host.management import ManagementMessage, build_management_frame, management_address
from netreduce.host.protocol import ControlMessage, build_control_frame
from netreduce.hw.switch.requests import WINDOW_BYTES, RequestDecoder
from netreduce.sim.roce_model import parse_frame
from netreduce.wire import ControlType, ManagementOp

ADDRESS = management_address(switch_mac="02:4e:52:00:00:fe", switch_ip="10.0.255.254",
                             manager_mac="02:00:00:00:99:01", manager_ip="10.0.99.1", manager_port=5000)
REQUEST_TYPES = (ControlType.CREDIT_REQUEST, ControlType.RESULT_REQUEST)


def tagged(frame, vid):
    return frame[:12] + bytes([0x81, 0x00, vid >> 8, vid & 0xFF]) + frame[12:]


def changed(frame, at, value):
    return frame[:at] + bytes(value) + frame[at + len(value):]


def cases(rng):
    """``(frame, kept, control, management)``: the frame, how much of it the monitor has, and the control and
    management requests it should decode to (None: not one)."""
    out = []
    for _ in range(40):
        kind = rng.choice(list(ControlType))
        message = ControlMessage(kind, rng.randrange(1 << 16), rng.randrange(256), rng.randrange(1 << 32))
        frame = build_control_frame(message, src_mac=0x020000000001, dst_mac=0x024E52000001, src_ip="10.0.1.1",
                                    dst_ip="10.0.255.1")
        vid = rng.choice([None, rng.randrange(1, 4095)])
        at = 42
        if vid is not None:
            frame, at = tagged(frame, vid), 46
        want = (kind in REQUEST_TYPES, kind == ControlType.RESULT_REQUEST, message.job, message.worker,
                message.value)
        out.append((frame, len(frame), want, None))
        if kind in REQUEST_TYPES:
            out.append((frame, at + 11, None, None))                                        # cut short
            out.append((changed(frame, at - 4, (8 + 11).to_bytes(2, "big")), len(frame), None, None))  # UDP length
            out.append((changed(frame, at, b"\x00"), len(frame), None, None))                # magic
            out.append((changed(frame, at + 2, b"\x09"), len(frame), None, None))            # version
    for _ in range(30):
        op = rng.choice(list(ManagementOp))
        message = ManagementMessage(op, rng.randrange(1 << 16), rng.randrange(1 << 16), rng.randrange(1 << 32),
                                    reply=rng.random() < 0.2)
        frame = build_management_frame(message, ADDRESS)
        want = (not message.reply, op == ManagementOp.WRITE, message.sequence, message.address, message.value)
        out.append((frame, len(frame), None, want))
        if not message.reply:
            out.append((frame, 53, None, None))                                              # cut short
            out.append((changed(frame, 45, b"\x03"), len(frame), None, None))                # op
            out.append((changed(frame, 38, (8 + 11).to_bytes(2, "big")), len(frame), None, None))   # UDP length
    rng.shuffle(out)
    return out


def test_requests_decode_as_the_host_library_built_them():
    rng = random.Random(11)
    dut = RequestDecoder()
    checked = []

    async def bench(ctx):
        for frame, kept, control, management in cases(rng):
            header = parse_frame(frame).header
            ctx.set(dut.window, int.from_bytes(frame[:WINDOW_BYTES].ljust(WINDOW_BYTES, b"\0"), "little"))
            ctx.set(dut.kept, kept)
            ctx.set(dut.tagged, header["vlan_valid"])
            ctx.set(dut.udp_length, header["udp_len"])
            await ctx.delay(1e-9)
            got = ctx.get(dut.control)
            if control is None or not control[0]:
                assert not got.ok, f"not a control request, decoded as one: {frame.hex()}"
            else:
                assert (got.ok, got.results, got.job, got.worker, got.value) == control
            got = ctx.get(dut.management)
            if management is None or not management[0]:
                assert not got.ok, f"not a management request, decoded as one: {frame.hex()}"
            else:
                assert (got.ok, got.write, got.sequence, got.address, got.value) == management
            checked.append((control is not None and control[0], management is not None and management[0]))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert (True, False) in checked and (False, True) in checked and (False, False) in checked
