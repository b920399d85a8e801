"""ComfyUI's `comfy.model_base` for node packs (compat/mp_model_base.py): `ModelType`, the model
classes (isinstance answered from our model's family) and `model_sampling(config, type)`; unCLIP's
`sdxl_pooled` / `unclip_adm` and the noise-augmentation modules (compat/noise_aug.py), for packs that
build their own SDXL-like class (Kolors-MZ's `KolorsSDXL.encode_adm`)."""
from compat.facade import facade

_NAMES = ("BaseModel", "SDXL", "SDXLRefiner", "SD21UNCLIP", "SVD_img2vid", "IP2P", "SD15_instructpix2pix",
          "SDXL_instructpix2pix", "SD_X4Upscaler", "StableCascade_C", "StableCascade_B", "SDXL_Playground_2_5", "SD3",
          "AuraFlow", "StableAudio1", "HunyuanDiT", "PixArt", "Flux", "FluxInpaint", "GenmoMochi", "LTXV",
          "HunyuanVideo", "CosmosVideo", "Lumina2", "WAN21", "WAN21_Vace", "WAN21_Camera", "WAN22", "WAN22_S2V", "WAN22_Animate", "HiDream", "Chroma", "ACEStep", "Omnigen2",
          "QwenImage", "Stable_Zero123", "SV3D_u", "SV3D_p", "StableAudio", "Hunyuan3Dv2", "Lotus",
          # today's classes (after 0.3.64) of families built here
          "ChromaRadiance", "Flux2", "Flux3", "LTXAV", "QwenImage21", "HunyuanVideo15", "HunyuanVideo15_SR_Distilled",
          "HunyuanVideoI2V", "HunyuanVideoSkyreelsI2V", "Anima", "CosmosPredict2",
          "Kandinsky5", "Kandinsky5Image", "ACEStep15", "StableAudio3", "WAN21_HuMo", "WAN22_WanDancer", "ModelType",
          "model_sampling", "ModelClassError", "convert_tensor")
facade(__name__, {**{name: f"compat.mp_model_base:{name}" for name in _NAMES},
                  # ComfyUI's unCLIP conditioning helpers (compat/noise_aug.py); `Timestep`,
                  # `CLIPEmbeddingNoiseAugmentation` and `ImageConcatWithNoiseAugmentation` are read
                  # through the modules ComfyUI imports them from (compat/comfy_reexports.json)
                  "sdxl_pooled": "compat.noise_aug:sdxl_pooled", "unclip_adm": "compat.noise_aug:unclip_adm"})
