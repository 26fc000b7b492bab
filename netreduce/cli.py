"""The ``netreduce`` command.

Each subcommand lives in ``netreduce.commands.<name>`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a callable taking the parsed arguments and returning an exit status.
A user error raises :class:`UserError`: it is printed as one line on standard error, never as a traceback.
"""

import argparse
import importlib
import sys

from . import __version__

__all__ = ["main", "UserError"]

COMMANDS = ["parse_pcap", "generate", "build", "configure", "testfloat", "simulate", "experiment"]


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``--help`` shows the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    parser = _Parser(
        prog="netreduce",
        description="In-network gradient aggregation on FPGAs, transparent to RoCE v2.")
    parser.add_argument("--version", action="version", version=f"netreduce {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"netreduce.commands.{name}").register(subparsers)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except UserError as error:
        print(f"netreduce: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    # run as ``python -m netreduce.cli``: this module is then ``__main__``, and the commands raise the
    # UserError of ``netreduce.cli``, so hand over to that module
    from netreduce.cli import main as package_main
    sys.exit(package_main())
