"""A V1 node pack for the progress_state traffic benchmark (bench/server.py --chains): an INT
chain `BenchChainStart -> BenchChainLink x (N-2) -> BenchChainEnd`. Plain ComfyUI V1 nodes, so
the same chain runs on ComfyUI itself for comparison."""
from __future__ import annotations


class BenchChainStart:
    CATEGORY = "bench"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0, "min": 0, "max": 1 << 30})}}

    def run(self, value):
        return (value,)


class BenchChainLink:
    CATEGORY = "bench"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True})}}

    def run(self, value):
        return (value + 1,)


class BenchChainEnd:
    CATEGORY = "bench"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True})}}

    def run(self, value):
        return {"ui": {"value": [value]}}


NODE_CLASS_MAPPINGS = {"BenchChainStart": BenchChainStart, "BenchChainLink": BenchChainLink,
                       "BenchChainEnd": BenchChainEnd}


def chain_prompt(nodes: int, seed: int = 0) -> dict:
    """An API-format chain of `nodes` (>= 2) nodes; `seed` makes its cache keys new."""
    prompt = {"1": {"class_type": "BenchChainStart", "inputs": {"value": seed}}}
    for i in range(2, nodes):
        prompt[str(i)] = {"class_type": "BenchChainLink", "inputs": {"value": [str(i - 1), 0]}}
    prompt[str(nodes)] = {"class_type": "BenchChainEnd", "inputs": {"value": [str(nodes - 1), 0]}}
    return prompt
