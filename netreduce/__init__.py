"""netreduce: in-network gradient aggregation on FPGAs, transparent to RoCE v2."""

__version__ = "0.1.0"
