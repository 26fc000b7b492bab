"""``netreduce testfloat``: push TestFloat-format operand pairs through the RTL adder (placeholder)."""

from ..cli import UserError


def register(subparsers):
    parser = subparsers.add_parser("testfloat", help="run TestFloat vectors through the RTL FP adder")
    parser.set_defaults(func=run)


def run(args):
    raise UserError("testfloat is not implemented yet")
