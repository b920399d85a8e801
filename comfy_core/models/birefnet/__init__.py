"""BiRefNet background removal (ComfyUI's BACKGROUND_REMOVAL model, `background_removal/` files):
the Swin backbone (`swin.py`), the network and its loading from ComfyUI's key layout
(`network.py`), and the model nodes run with its pre- and post-processing (`model.py`)."""
