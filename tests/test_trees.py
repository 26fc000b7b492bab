"""Unit test of hw/trees.py (``pairwise``): a balanced tree of pairs over the items in their order."""

import pytest

from netreduce.hw.trees import pairwise


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 17])
def test_pairwise_combines_neighbours_in_order_level_by_level(n):
    """Concatenation shows the order (every item once, earlier first); the nesting shows the levels: a tree of
    ceil(log2 n) levels, an odd one out going up as it is."""
    calls = []

    def pair(a, b):
        calls.append((a, b))
        return f"({a}{b})"

    root = pairwise([chr(ord("a") + i) for i in range(n)], pair)
    assert root.replace("(", "").replace(")", "") == "".join(chr(ord("a") + i) for i in range(n))
    assert len(calls) == n - 1
    depth = max(root[:i].count("(") - root[:i].count(")") for i in range(len(root) + 1))
    assert depth == (n - 1).bit_length()
    if n == 5:
        assert root == "(((ab)(cd))e)"


def test_pairwise_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no items"):
        pairwise([], lambda a, b: a)
