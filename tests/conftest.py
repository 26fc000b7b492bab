"""Suite-wide pytest hooks."""


def pytest_collection_modifyitems(session, config, items):
    """Long simulations (marked ``slow``) first: pytest-xdist hands tests out in collection order, so the
    long builds start at once and overlap the many short tests instead of trailing them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
