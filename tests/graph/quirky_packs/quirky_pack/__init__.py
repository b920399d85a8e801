"""A V1 pack whose declarations have the quirks real packs have (tests/graph/test_graph_pack_quirks.py).

- `QuirkyMakeList` names `value1` under `required` and again, with `value1..value4`, under
  `optional` (as ComfyUI's own execution-test pack does with its list-making node);
- `QuirkyBadValidate` and `QuirkyBadOutputs` cannot be run (a non-callable `VALIDATE_INPUTS`,
  an `OUTPUT_IS_LIST` that is not a sequence): they are skipped, alone;
- `QuirkyPlain` comes after them and must still load.
Plain Python values only, no torch.
"""

LIST_SOCKETS = 5


class QuirkyMakeList:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"value1": ("INT", {"default": 1})},
            "optional": {f"value{i}": ("INT", {"default": 0}) for i in range(1, LIST_SOCKETS)},
        }

    RETURN_TYPES = ("INT",)
    OUTPUT_IS_LIST = (True,)
    FUNCTION = "make_list"
    CATEGORY = "Testing/Lists"

    def make_list(self, **kwargs):
        return ([kwargs[f"value{i}"] for i in range(1, LIST_SOCKETS) if f"value{i}" in kwargs],)


class QuirkyBadValidate:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    VALIDATE_INPUTS = True  # not a function: ComfyUI fails every prompt that uses this node

    def run(self, x):
        return (x,)


class QuirkyBadOutputs:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT",)}}

    RETURN_TYPES = ("INT",)
    OUTPUT_IS_LIST = True  # not a tuple: ComfyUI fails when it merges this node's results
    FUNCTION = "run"

    def run(self, x):
        return (x,)


class QuirkyPlain:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"values": ("INT",)}}

    RETURN_TYPES = ("INT",)
    INPUT_IS_LIST = True
    FUNCTION = "total"
    OUTPUT_NODE = True

    def total(self, values):
        return {"ui": {"total": [sum(values)]}, "result": (sum(values),)}


NODE_CLASS_MAPPINGS = {
    "QuirkyMakeList": QuirkyMakeList,
    "QuirkyBadValidate": QuirkyBadValidate,
    "QuirkyBadOutputs": QuirkyBadOutputs,
    "QuirkyPlain": QuirkyPlain,
}
