"""Frame interpolation (ComfyUI's INTERP_MODEL, `frame_interpolation/` files): FILM (`film.py`),
RIFE's IFNet (`rife.py`), and loading either from its weights plus the frame loop FrameInterpolate
runs (`model.py`)."""
