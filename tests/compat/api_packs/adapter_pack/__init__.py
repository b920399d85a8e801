"""A fixture pack that reads LoRA files with ComfyUI's adapter classes itself, as ComfyUI's
`comfy.lora.load_lora` and packs that copy its loop do: for each layer name of the key map, each
class of `comfy.weight_adapter.adapters` is asked to `load` it; the adapters become the model's
patches. Its weight maths override recognises adapters with `isinstance(v, WeightAdapterBase)`."""
import comfy.lora
import comfy.weight_adapter
from comfy.weight_adapter import WeightAdapterBase


def load_with_adapters(lora, key_map):
    patch_dict = {}
    loaded_keys = set()
    for x in key_map:
        alpha_name = "{}.alpha".format(x)
        alpha = None
        if alpha_name in lora:
            alpha = lora[alpha_name].item()
            loaded_keys.add(alpha_name)
        dora_scale = lora.get("{}.dora_scale".format(x))
        for adapter_cls in comfy.weight_adapter.adapters:
            adapter = adapter_cls.load(x, lora, alpha, dora_scale, loaded_keys)
            if adapter is not None:
                patch_dict[key_map[x]] = adapter
                loaded_keys.update(adapter.loaded_keys)
                break
    return patch_dict, loaded_keys


def kinds_of(patches):
    return sorted({type(v).__name__ for v in patches.values() if isinstance(v, WeightAdapterBase)})
