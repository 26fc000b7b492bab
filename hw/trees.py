"""Balanced trees of pairs (``pairwise``): where a choice or a count over many lanes or candidates is made in
hardware, a tree of log2(n) levels of two-input steps rather than one chain of n."""

__all__ = ["pairwise"]


def pairwise(items, pair):
    """Combine ``items`` in a balanced tree: ``pair(a, b)`` of neighbours, ``a`` the earlier, level by level (an
    odd one out goes up a level as it is); returns the root (the one item, if there is one)."""
    items = list(items)
    if not items:
        raise ValueError("pairwise: no items")
    while len(items) > 1:
        pairs, items = items, [pair(a, b) for a, b in zip(items[0::2], items[1::2], strict=False)]
        if len(pairs) % 2:
            items.append(pairs[-1])
    return items[0]
