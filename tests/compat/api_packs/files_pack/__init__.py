"""Fixture pack (area "files"): nodes that load and use models through ComfyUI's Python API the
way real packs do (Comfyroll's and Easy-Use's loaders, IPAdapter_plus's CLIP-vision calls,
KJNodes' LoRA key maps), so tests can compare their outputs with the built-in nodes'."""
import comfy.clip_vision
import comfy.lora
import comfy.sd
import comfy.sd1_clip
import comfy.sdxl_clip
import comfy.utils
import folder_paths
from comfy.sd import VAE  # packs import the class at load time (AnimateDiff, Advanced-ControlNet)


class FilesCheckpointLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ckpt_name": (folder_paths.get_filename_list("checkpoints"),)}}

    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    FUNCTION = "load"
    CATEGORY = "tests/files"

    def load(self, ckpt_name):
        path = folder_paths.get_full_path_or_raise("checkpoints", ckpt_name)
        out = comfy.sd.load_checkpoint_guess_config(path, output_vae=True, output_clip=True,
                                                    embedding_directory=folder_paths.get_folder_paths("embeddings"))
        return out[:3]


class FilesLoraLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "clip": ("CLIP",),
                             "lora_name": (folder_paths.get_filename_list("loras"),),
                             "strength_model": ("FLOAT", {"default": 1.0}), "strength_clip": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL", "CLIP")
    FUNCTION = "load"
    CATEGORY = "tests/files"

    def load(self, model, clip, lora_name, strength_model, strength_clip):
        lora = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("loras", lora_name), safe_load=True)
        return comfy.sd.load_lora_for_models(model, clip, lora, strength_model, strength_clip)


class FilesLoraByKeyMap:
    """KJNodes' / Easy-Use's way: build the key map, parse the file, add the patches."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "lora_name": (folder_paths.get_filename_list("loras"),),
                             "strength": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"
    CATEGORY = "tests/files"

    def load(self, model, lora_name, strength):
        lora = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("loras", lora_name))
        key_map = comfy.lora.model_lora_keys_unet(model.model, {})
        patches = comfy.lora.load_lora(lora, key_map)
        patched = model.clone()
        patched.add_patches(patches, strength)
        return (patched,)


class FilesTextEncode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip": ("CLIP",), "text": ("STRING", {"multiline": True})}}

    RETURN_TYPES = ("CONDITIONING", "CONDITIONING", "BOOLEAN")
    FUNCTION = "encode"
    CATEGORY = "tests/files"

    def encode(self, clip, text):
        tokens = clip.tokenize(text)
        cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
        scheduled = clip.encode_from_tokens_scheduled(tokens)
        # Easy-Use's family test (nodes/logic.py)
        is_sdxl = isinstance(clip.cond_stage_model, (comfy.sdxl_clip.SDXLClipModel, comfy.sdxl_clip.SDXLRefinerClipModel,
                                                     comfy.sdxl_clip.SDXLClipG))
        return [[cond, {"pooled_output": pooled}]], scheduled, is_sdxl


class FilesVAE:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"vae": ("VAE",), "samples": ("LATENT",)}}

    RETURN_TYPES = ("IMAGE", "LATENT")
    FUNCTION = "run"
    CATEGORY = "tests/files"

    def run(self, vae, samples):
        if not isinstance(vae, VAE):
            raise TypeError("not a comfy.sd.VAE")
        image = vae.decode(samples["samples"])
        return image, {"samples": vae.encode(image[:, :, :, :3])}


class FilesVAEFromStateDict:
    """Easy-Use's loader: `comfy.sd.VAE(sd=load_torch_file(path))`."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"vae_name": (folder_paths.get_filename_list("vae"),)}}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "load"
    CATEGORY = "tests/files"

    def load(self, vae_name):
        sd = comfy.utils.load_torch_file(folder_paths.get_full_path_or_raise("vae", vae_name))
        return (comfy.sd.VAE(sd=sd),)


class FilesClipVisionEncode:
    """IPAdapter_plus's way: load, preprocess, call the model with intermediate_output=-2."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip_name": (folder_paths.get_filename_list("clip_vision"),), "image": ("IMAGE",)}}

    RETURN_TYPES = ("CLIP_VISION_OUTPUT", "CLIP_VISION_OUTPUT")
    FUNCTION = "encode"
    CATEGORY = "tests/files"

    def encode(self, clip_name, image):
        clip_vision = comfy.clip_vision.load(folder_paths.get_full_path_or_raise("clip_vision", clip_name))
        direct = clip_vision.encode_image(image)
        pixel_values = comfy.clip_vision.clip_preprocess(image.to(clip_vision.load_device),
                                                         size=clip_vision.image_size).float()
        out = clip_vision.model(pixel_values=pixel_values, intermediate_output=-2)
        manual = comfy.clip_vision.Output()
        manual["last_hidden_state"] = out[0]
        manual["image_embeds"] = out[2]
        manual["penultimate_hidden_states"] = out[1]
        return direct, manual


NODE_CLASS_MAPPINGS = {
    "FilesCheckpointLoader": FilesCheckpointLoader,
    "FilesLoraLoader": FilesLoraLoader,
    "FilesLoraByKeyMap": FilesLoraByKeyMap,
    "FilesTextEncode": FilesTextEncode,
    "FilesVAE": FilesVAE,
    "FilesVAEFromStateDict": FilesVAEFromStateDict,
    "FilesClipVisionEncode": FilesClipVisionEncode,
}
