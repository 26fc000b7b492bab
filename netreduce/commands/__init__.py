"""Subcommands of the ``netreduce`` CLI; see :mod:`netreduce.cli`."""
