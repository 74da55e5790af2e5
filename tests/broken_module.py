"""A recipe module that fails while it is imported (used by tests/test_errors.py)."""

RATIO = 1 / 0


def build(n: int = 8):
    raise AssertionError("never reached")
