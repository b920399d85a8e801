"""Style models (STYLE_MODEL): image tokens from a CLIP vision output appended to the text
conditioning. `t2i_style`: the T2I-Adapter style model (SD1.x); `redux`: Flux Redux's image
encoder; `style_model`: `StyleModel` and `load_style_model`; `apply`: StyleModelApply's maths."""
