"""ComfyUI's `comfy.text_encoders.lt` for node packs: LTX-Video's T5-XXL tokenizer, our class
(`comfy_core.families.ltxv.encoders`); the encoder set is the Mochi / LTX T5-XXL set there."""
from compat.facade import facade

facade(__name__, {"LTXVT5Tokenizer": "comfy_core.families.ltxv.encoders:LTXVT5Tokenizer"})
