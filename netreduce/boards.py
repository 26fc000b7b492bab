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

    def platform_class(self):
        import importlib  # amaranth-boards is loaded only when a board is built
        module, name = self.platform.split(":")
        return getattr(importlib.import_module(module), name)


BOARDS = {
    "versa-ecp5": Board("amaranth_boards.versa_ecp5:VersaECP5Platform", 2, "clk100", 100_000_000),
    "butterstick": Board("amaranth_boards.butterstick:ButterStickPlatform", 1, "clk30", 30_000_000),
    "ecpix5-85": Board("amaranth_boards.ecpix5:ECPIX585Platform", 1, "clk100", 100_000_000),
}
