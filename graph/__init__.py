"""The graph engine: node specs, registry, validation, ordering, caching, execution, events.

This package never imports torch (tests/graph/test_no_torch.py proves it), so it can be used and
tested on its own.
"""
