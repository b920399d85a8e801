"""ComfyUI's per-architecture merge nodes (comfy_extras/nodes_model_merging_model_specific.py,
0.3.64): ModelMergeBlocks with one ratio per block of an architecture (ModelMergeSD1, SD2, SDXL,
SD3_2B, SD35_Large, Auraflow, Flux1, LTXV, MochiPreview, Cosmos7B, Cosmos14B, CosmosPredict2_2B,
CosmosPredict2_14B, QwenImage, WAN2_1).

A weight takes the ratio of the longest block prefix its name starts with (the first ratio when
none does), exactly as ModelMergeBlocks. The merge is the same weight maths on whatever keys the
two models have, so it works on any architecture we can load; the block names are data
(`nodes/_merge_blocks.py`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from graph.native import Input, Output, node
from nodes._merge_blocks import BLOCKS, DESCRIPTIONS
from nodes.model_merging import merge_blocks, ratio_input

MODULE = "comfy_extras.nodes_model_merging_model_specific"
CATEGORY = "advanced/model_merging/model_specific"


def _declare(node_id: str) -> Callable:
    """The node `node_id`: model1, model2, then a ratio input per block of `BLOCKS[node_id]`."""
    names: Sequence[str] = BLOCKS[node_id]

    @node(node_id, display_name=node_id, category=CATEGORY, python_module=MODULE,
          description=DESCRIPTIONS.get(node_id, ""),
          inputs=[Input("model1", "MODEL"), Input("model2", "MODEL"), *(ratio_input(n) for n in names)],
          outputs=[Output("MODEL")])
    def merge(model1: Any, model2: Any, **ratios: float) -> tuple[Any]:
        return merge_blocks(model1, model2, names, ratios)

    merge.__name__ = merge.__qualname__ = node_id
    merge.__doc__ = f"ModelMergeBlocks over the {len(names)} blocks of {node_id[len('ModelMerge'):]}."
    return merge


model_merge_sd1 = _declare("ModelMergeSD1")
model_merge_sd2 = _declare("ModelMergeSD2")
model_merge_sdxl = _declare("ModelMergeSDXL")
model_merge_sd3_2b = _declare("ModelMergeSD3_2B")
model_merge_auraflow = _declare("ModelMergeAuraflow")
model_merge_flux1 = _declare("ModelMergeFlux1")
model_merge_sd35_large = _declare("ModelMergeSD35_Large")
model_merge_mochi_preview = _declare("ModelMergeMochiPreview")
model_merge_ltxv = _declare("ModelMergeLTXV")
model_merge_cosmos_7b = _declare("ModelMergeCosmos7B")
model_merge_cosmos_14b = _declare("ModelMergeCosmos14B")
model_merge_wan2_1 = _declare("ModelMergeWAN2_1")
model_merge_cosmos_predict2_2b = _declare("ModelMergeCosmosPredict2_2B")
model_merge_cosmos_predict2_14b = _declare("ModelMergeCosmosPredict2_14B")
model_merge_qwen_image = _declare("ModelMergeQwenImage")
