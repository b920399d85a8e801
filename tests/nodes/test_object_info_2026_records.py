"""The second batch of 2026 nodes (issue 29) has its hand-recorded `/object_info` entries; the
parity itself is tests/nodes/test_object_info_2026.py, which compares every record."""
from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "object_info_2026"
BATCH = {"SaveImageAdvanced", "CreateList", "GetItemFromList", "StartLoop", "EndLoop", "LoopIteration", "LoopProgress",
         "LoopResult", "ImageCropV2", "ImageCropToMask", "Video Slice", "LatentCutToBatch", "ImageHistogram", "CurveEditor",
         "Painter"}


def test_every_node_of_the_batch_is_recorded_with_its_source():
    for name in BATCH:
        record = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
        assert record["name"] == name and "Comfy-Org/ComfyUI" in record["_source"], name
