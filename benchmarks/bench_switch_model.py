"""Speed of the switch's golden model and of the whole emulated all-reduce; prints one JSON object.

    python benchmarks/bench_switch_model.py [--packets 1000000] [--workers 8] [--mtu 1024]

- ``model``: frames straight into ``SwitchModel.receive`` on one core: N workers each sending
  single-packet-per-slot messages of ``message_packets`` packets of ``mtu`` bytes (binary32), and every
  receiver's ACK of each message, until ``--packets`` frames went in. Frames are built beforehand, a
  message at a time, outside the timed region; only ``receive`` is timed. The goal is a million packets
  in under 30 seconds.
- ``network``: ``netreduce simulate``'s engine (emulated RC endpoints, links, the model) on a clean
  network, in packets into the switch per second of wall time.
"""

import argparse
import json
import time

import numpy as np

from netreduce.host.network import build_allreduce
from netreduce.host.packets import build_ack, build_roce_frame
from netreduce.host.protocol import AggHeader
from netreduce.sim.roce_model import deparse_frame, parse_frame
from netreduce.sim.switch_model import ConnectionConfig, JobConfig, SwitchConfig, SwitchModel


def model_speed(packets, workers, mtu, message_packets=4):
    job = JobConfig(job=1, workers=workers, mtu=mtu, message_packets=message_packets, message_slots=4)
    macs = [0x020000000001 + w for w in range(workers)]
    ips = [f"10.0.0.{w + 1}" for w in range(workers)]
    conns = [ConnectionConfig(1, w, macs[w], ips[w], 0x100 + w, macs[(w + 1) % workers],
                              ips[(w + 1) % workers], 0x200 + w, start_psn=0) for w in range(workers)]
    switch = SwitchModel(SwitchConfig(jobs=[job], connections=conns))
    rng = np.random.default_rng(0)
    # header templates from scapy-built frames; each packet is the template with its PSN and opcode
    data = [parse_frame(build_roce_frame(0x06, bytes(mtu), reth=(0, 1, mtu * message_packets),
                                         eth_src=macs[w], eth_dst=macs[(w + 1) % workers], src_ip=ips[w],
                                         dst_ip=ips[(w + 1) % workers], dest_qp=0x200 + w)).header
            for w in range(workers)]
    acks = [parse_frame(build_ack(0, 0, eth_src=macs[(w + 1) % workers], eth_dst=macs[w],
                                  src_ip=ips[(w + 1) % workers], dst_ip=ips[w], dest_qp=0x100 + w)).header
            for w in range(workers)]
    opcodes = [0x06] + [0x07] * (message_packets - 2) + [0x08] if message_packets > 1 else [0x0A]
    sent = seq = 0
    elapsed = 0.0
    while sent < packets:
        frames = []
        for w in range(workers):
            body = rng.standard_normal(mtu // 4 * message_packets).astype("<f4").tobytes()
            for i, opcode in enumerate(opcodes):
                payload = body[i * mtu:(i + 1) * mtu]
                if i == 0:
                    payload = AggHeader(1, seq, 0).pack() + payload[16:]
                header = {**data[w], "bth_opcode": opcode, "bth_psn": seq * message_packets + i}
                if i:       # no RETH after the first packet: 16 bytes shorter
                    header.update(has_reth=0, ip_len=header["ip_len"] - 16, udp_len=header["udp_len"] - 16)
                frames.append(deparse_frame(header, payload))
        for w in range(workers):
            frames.append(deparse_frame({**acks[w], "bth_psn": seq * message_packets + message_packets - 1},
                                        b""))
        start = time.perf_counter()
        for frame in frames:
            switch.receive(0, frame)
        elapsed += time.perf_counter() - start
        sent += len(frames)
        seq += 1
    c = switch.counters
    assert c["aggregated"] == c["results_sent"] == seq * workers * message_packets, dict(c)
    return {"packets": sent, "seconds": round(elapsed, 2), "packets_per_second": round(sent / elapsed),
            "workers": workers, "mtu": mtu, "results_sent": c["results_sent"]}


def network_speed(workers, nbytes, mtu):
    network, _, _ = build_allreduce(workers=workers, nbytes=nbytes, mtu=mtu)
    start = time.perf_counter()
    status = network.run()
    elapsed = time.perf_counter() - start
    summary = network.summary()
    return {"status": status, "workers": workers, "bytes_per_worker": nbytes, "mtu": mtu,
            "packets_into_switch": summary["host_to_switch"]["packets"], "seconds": round(elapsed, 2),
            "packets_per_second": round(summary["host_to_switch"]["packets"] / elapsed)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--mtu", type=int, default=1024)
    args = parser.parse_args()
    print(json.dumps({"model": model_speed(args.packets, args.workers, args.mtu),
                      "network": network_speed(args.workers, 4 << 20, args.mtu)}))


if __name__ == "__main__":
    main()
