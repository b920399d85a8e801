"""Shared with the fixture pack of tests/web/test_web_pack_start.py (same process): the pack's
import counts itself in IMPORTS and waits for GATE, so a test decides when its import ends."""
import threading

GATE = threading.Event()
IMPORTS: list[str] = []
