"""LoRA training on our model objects (today's ComfyUI's comfy_extras/nodes_train.py, written here).

    result = train_lora(model, [latent["samples"]], conditioning, TrainSettings(steps=100))
    result.lora      # ComfyUI's LORA_MODEL: `diffusion_model.<layer>.lora_up.weight`, ... -> tensor
    result.losses    # the loss of every step
    result.model     # a clone of `model` running the trained adapters (forward-time)

`adapters` makes the trainable records and names them as ComfyUI saves them; `trainer` runs the
loop as a sampling run of the model (its SAMPLER object trains); `loss_graph` draws the loss curve
LossGraphNode shows. Import submodules directly; nothing happens at import.
"""
