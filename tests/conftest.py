"""Suite-wide pytest hooks, and the Hypothesis profiles."""

from hypothesis import settings

# The generated tests draw the same examples on every run (``repeatable``: seeded from each test's own code, no
# example database), so that a run of the suite, CI's included, passes or fails on the code alone and a failure
# is reproduced by running it again. ``pytest --hypothesis-profile=explore`` draws fresh examples (and keeps
# the failing ones in ``.hypothesis/``): the way to look for new cases (README, "Set up and test").
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("repeatable")


def _order(item):
    """Leaders of builds first, then the longest tests first (see ``pytest_collection_modifyitems``)."""
    marker = item.get_closest_marker("slow")
    minutes = 0 if marker is None else marker.kwargs.get("minutes", 1)
    return (item.get_closest_marker("build_leader") is None, -minutes)


def pytest_collection_modifyitems(session, config, items):
    """The longest tests first: ``slow(minutes=m)`` marks a test that takes about ``m`` minutes on one
    core. pytest-xdist, scheduling one test at a time (``--maxschedchunk=1`` in pyproject.toml), then
    hands them out longest first, so the long builds overlap the many short tests instead of trailing
    them on one worker. Before them all come the ``build_leader`` tests, one for each simulation build
    (Verilog, Verilator, g++: one to three minutes on an empty cache): each leader builds a design no other
    leader needs, so the two workers build different designs at once instead of one waiting on the other's
    build lock for a design they both need."""
    items.sort(key=_order)
