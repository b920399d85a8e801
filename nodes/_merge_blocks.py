"""Block prefixes of ComfyUI's per-architecture merge nodes (comfy_extras/nodes_model_merging_model_specific.py,
0.3.64), as data: node name -> the ratio inputs in ComfyUI's order. Each input is a prefix of the
diffusion model's weight names (without `diffusion_model.`); the names were read from ComfyUI's
/object_info (tests/data/comfyui_0.3.64_object_info.json), trailing dots and all (SDXL's block
names have none, as there)."""
from __future__ import annotations


def numbered(pattern: str, count: int) -> tuple[str, ...]:
    """`pattern` with 0 .. count-1 in its `{}`."""
    return tuple(pattern.format(i) for i in range(count))


_SD1 = ("time_embed.", "label_emb.", *numbered("input_blocks.{}.", 12), *numbered("middle_block.{}.", 3),
        *numbered("output_blocks.{}.", 12), "out.")

BLOCKS: dict[str, tuple[str, ...]] = {
    "ModelMergeSD1": _SD1,
    "ModelMergeSD2": _SD1,  # SD2's UNet has SD1's blocks
    "ModelMergeSDXL": ("time_embed.", "label_emb.", *numbered("input_blocks.{}", 9), *numbered("middle_block.{}", 3),
                       *numbered("output_blocks.{}", 9), "out."),
    "ModelMergeSD3_2B": ("pos_embed.", "x_embedder.", "context_embedder.", "y_embedder.", "t_embedder.",
                         *numbered("joint_blocks.{}.", 24), "final_layer."),
    "ModelMergeAuraflow": ("init_x_linear.", "positional_encoding", "cond_seq_linear.", "register_tokens", "t_embedder.",
                           *numbered("double_layers.{}.", 4), *numbered("single_layers.{}.", 32), "modF.",
                           "final_linear."),
    "ModelMergeFlux1": ("img_in.", "time_in.", "guidance_in", "vector_in.", "txt_in.", *numbered("double_blocks.{}.", 19),
                        *numbered("single_blocks.{}.", 38), "final_layer."),
    "ModelMergeSD35_Large": ("pos_embed.", "x_embedder.", "context_embedder.", "y_embedder.", "t_embedder.",
                             *numbered("joint_blocks.{}.", 38), "final_layer."),
    "ModelMergeMochiPreview": ("pos_frequencies.", "t_embedder.", "t5_y_embedder.", "t5_yproj.", *numbered("blocks.{}.", 48),
                               "final_layer."),
    "ModelMergeLTXV": ("patchify_proj.", "adaln_single.", "caption_projection.", *numbered("transformer_blocks.{}.", 28),
                       "scale_shift_table", "proj_out."),
    "ModelMergeCosmos7B": ("pos_embedder.", "extra_pos_embedder.", "x_embedder.", "t_embedder.", "affline_norm.",
                           *numbered("blocks.block{}.", 28), "final_layer."),
    "ModelMergeCosmos14B": ("pos_embedder.", "extra_pos_embedder.", "x_embedder.", "t_embedder.", "affline_norm.",
                            *numbered("blocks.block{}.", 36), "final_layer."),
    "ModelMergeWAN2_1": ("patch_embedding.", "time_embedding.", "time_projection.", "text_embedding.", "img_emb.",
                         *numbered("blocks.{}.", 40), "head."),
    "ModelMergeCosmosPredict2_2B": ("pos_embedder.", "x_embedder.", "t_embedder.", "t_embedding_norm.",
                                    *numbered("blocks.{}.", 28), "final_layer."),
    "ModelMergeCosmosPredict2_14B": ("pos_embedder.", "x_embedder.", "t_embedder.", "t_embedding_norm.",
                                     *numbered("blocks.{}.", 36), "final_layer."),
    "ModelMergeQwenImage": ("pos_embeds.", "img_in.", "txt_norm.", "txt_in.", "time_text_embed.",
                            *numbered("transformer_blocks.{}.", 60), "proj_out."),
}

DESCRIPTIONS: dict[str, str] = {
    "ModelMergeWAN2_1": "1.3B model has 30 blocks, 14B model has 40 blocks. Image to video model has the extra img_emb.",
}
