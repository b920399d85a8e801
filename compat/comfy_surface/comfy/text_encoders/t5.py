"""ComfyUI's `comfy.text_encoders.t5` for node packs: the T5 encoder's module classes.

Our T5 tower (comfy_core/text_encoders/t5.py) holds transformers' `T5EncoderModel` as its
`transformer`, so ComfyUI's `T5` (the class of `cond_stage_model.t5xxl.transformer`) is
`T5EncoderModel` here and its layers are transformers' T5 classes of the same names: packs'
`isinstance` checks and module walks see the modules our T5 is made of. Their constructors are
transformers' (a `T5Config`), not ComfyUI's, and the forward pass is ours (comfy_core's
`T5TextEncoder.encode_ids`), so replacing a layer class's `forward` changes nothing here.
"""
from compat.facade import facade

_T = "transformers.models.t5.modeling_t5:"
facade(__name__, {
    "T5": _T + "T5EncoderModel",
    **{name: _T + name for name in ("T5Stack", "T5Block", "T5LayerNorm", "T5Attention", "T5LayerSelfAttention",
                                    "T5LayerFF", "T5DenseActDense", "T5DenseGatedActDense")},
})
