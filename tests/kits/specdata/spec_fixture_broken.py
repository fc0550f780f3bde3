"""A module that fails while being imported (for the spec tests)."""

raise RuntimeError("boom")
