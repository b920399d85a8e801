"""ComfyUI's `comfy.ldm.ace.lyric_encoder` for node packs: ACE-Step's Conformer lyric encoder
(`comfy_core.families.ace_step.lyric_encoder`)."""
from compat.facade import facade

_M = "comfy_core.families.ace_step.lyric_encoder:"
facade(__name__, {
    "ConformerEncoder": _M + "LyricEncoder",
    "RelPositionMultiHeadedAttention": _M + "RelPositionAttention",
    "PositionwiseFeedForward": _M + "FeedForward",
    "ConformerEncoderLayer": _M + "EncoderLayer",
})
