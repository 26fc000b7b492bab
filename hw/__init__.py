"""Amaranth components of the NetReduce switch."""
