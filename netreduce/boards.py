"""The boards ``netreduce build`` knows (``netreduce.hw.boards`` builds the switch on them): plain data, so
that the command line can list them without loading Amaranth."""

from dataclasses import dataclass

__all__ = ["Board", "BOARDS"]


@dataclass(frozen=True)
class Board:
    platform: str           # the amaranth-boards platform class, "module:Class"
    ports: int              # RGMII ports (eth_rgmii 0 .. ports - 1)
    clock: str              # the oscillator's resource
    clock_hz: int
    # ``build``'s switch defaults where this board's differ, as (option, value) pairs: a switch that fits
    switch_defaults: tuple = ()

    def platform_class(self):
        import importlib  # amaranth-boards is loaded only when a board is built
        module, name = self.platform.split(":")
        return getattr(importlib.import_module(module), name)


ONE_PORT_DEFAULTS = (("forwarding_entries", 1),)

BOARDS = {
    # the LFE5UM-45F: a worker on each of its two ports (the general board defaults pack into 112 % of its
    # logic cells, these into 70 %: docs/ARCHITECTURE.md, "Boards"); frames of 1,536 bytes at most (a
    # standard Ethernet frame, an MTU-1024 RoCE payload), so that each port's receive buffer and the packet
    # ring, two longest frames each, take 512 words of block RAM, not 1,024: the switch fits its 108 DP16KD
    "versa-ecp5": Board("amaranth_boards.versa_ecp5:VersaECP5Platform", 2, "clk100", 100_000_000,
                        switch_defaults=(("workers", 2), ("forwarding_entries", 4), ("egress_queues", 2),
                                         ("bounded_loss", False), ("max_frame", 1536))),
    # one port: every frame leaves by it, so the forwarding table has one entry only (the register map keeps it)
    "butterstick": Board("amaranth_boards.butterstick:ButterStickPlatform", 1, "clk30", 30_000_000,
                         switch_defaults=ONE_PORT_DEFAULTS),
    "ecpix5-85": Board("amaranth_boards.ecpix5:ECPIX585Platform", 1, "clk100", 100_000_000,
                       switch_defaults=ONE_PORT_DEFAULTS),
}
