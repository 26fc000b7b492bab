"""Suite-wide pytest hooks."""


def _expected_minutes(item):
    marker = item.get_closest_marker("slow")
    return 0 if marker is None else marker.kwargs.get("minutes", 1)


def pytest_collection_modifyitems(session, config, items):
    """The longest tests first: ``slow(minutes=m)`` marks a test that takes about ``m`` minutes on one
    core. pytest-xdist, scheduling one test at a time (``--maxschedchunk=1`` in pyproject.toml), then
    hands them out longest first, so the long builds overlap the many short tests instead of trailing
    them on one worker."""
    items.sort(key=_expected_minutes, reverse=True)
