"""Basic V1 nodes: constants, arithmetic, output sinks, validation hooks."""



class CallLog:
    """Which node ids ran, in order (shared by the test and the nodes through a class attribute)."""

    calls: list = []


def _log(name, **kw):
    CallLog.calls.append((name, kw))


class IntConst:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0, "min": -1000, "max": 1000})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "testing"

    def run(self, value):
        _log("IntConst", value=value)
        return (value,)


class Add:
    DESCRIPTION = "Adds two integers."

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT", {"default": 0}), "b": ("INT", {"default": 0})}}

    RETURN_TYPES = ("INT",)
    RETURN_NAMES = ("sum",)
    OUTPUT_TOOLTIPS = ("a + b",)
    FUNCTION = "add"
    CATEGORY = "testing/math"

    def add(self, a, b):
        _log("Add", a=a, b=b)
        return (a + b,)


class Collect:
    """An output node that shows its value in the UI."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("*", {})}, "hidden": {"unique_id": "UNIQUE_ID"}}

    RETURN_TYPES = ()
    FUNCTION = "collect"
    OUTPUT_NODE = True
    CATEGORY = "testing"

    def collect(self, value, unique_id=None):
        _log("Collect", value=value, unique_id=unique_id)
        return {"ui": {"values": [value]}}


class Fail:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "fail"

    def fail(self, value):
        _log("Fail", value=value)
        raise ValueError(f"failing on purpose with {value}")


class Choose:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"mode": (["first", "second", "third"],), "text": ("STRING", {"default": ""}),
                             "ratio": ("FLOAT", {"default": 0.5, "min": 0.0, "max": 1.0}),
                             "flag": ("BOOLEAN", {"default": False})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "choose"

    def choose(self, mode, text, ratio, flag):
        _log("Choose", mode=mode, text=text, ratio=ratio, flag=flag)
        return (f"{mode}:{text}:{ratio}:{flag}",)


class Even:
    """VALIDATE_INPUTS naming `value`: the built-in max check is off for it."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0, "min": 0, "max": 10})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def VALIDATE_INPUTS(cls, value):
        if value is None:
            return True
        return True if value % 2 == 0 else f"{value} is odd"

    def run(self, value):
        return (value,)


class AnyTypeCheck:
    """VALIDATE_INPUTS taking `input_types`: the link type check is skipped."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("STRING",)}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def VALIDATE_INPUTS(cls, input_types):
        return True if input_types.get("value") in ("INT", "STRING") else f"bad type {input_types}"

    def run(self, value):
        return (str(value),)


class KwargsValidate:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"min": 0, "max": 1})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def VALIDATE_INPUTS(cls, **kwargs):
        return True

    def run(self, value):
        return (value,)


class RaisingValidate:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def VALIDATE_INPUTS(cls, value):
        raise RuntimeError("validator exploded")

    def run(self, value):
        return (value,)


class Changing:
    """IS_CHANGED returns NaN: the node and everything after it always run."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def IS_CHANGED(cls, value):
        return float("nan")

    def run(self, value):
        _log("Changing", value=value)
        return (value,)


class Fingerprint:
    """IS_CHANGED returns a class-level token that tests change; linked inputs arrive as None."""

    token = "a"
    seen: list = []

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "salt": ("STRING", {"default": ""})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def IS_CHANGED(cls, value, salt):
        cls.seen.append((value, salt))
        return cls.token

    def run(self, value, salt):
        _log("Fingerprint", value=value)
        return (value,)


class BadFingerprint:
    """IS_CHANGED with the wrong signature raises: ComfyUI treats that as always changed."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def IS_CHANGED(cls, wrong_name):
        return 1

    def run(self, value):
        _log("BadFingerprint", value=value)
        return (value,)


class Counter:
    """Keeps state on the instance: shows instances are reused per (node id, class)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    NOT_IDEMPOTENT = True

    def __init__(self):
        self.count = 0

    def run(self, value):
        self.count += 1
        _log("Counter", value=value, count=self.count, instance=id(self))
        return (self.count,)


class Hidden:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}, "hidden": {"prompt": "PROMPT", "dynprompt": "DYNPROMPT",
                                           "extra_pnginfo": "EXTRA_PNGINFO", "unique_id": "UNIQUE_ID"}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, prompt, dynprompt, extra_pnginfo, unique_id):
        _log("Hidden", prompt=prompt, dynprompt=dynprompt, extra_pnginfo=extra_pnginfo, unique_id=unique_id)
        return {"ui": {"id": [unique_id]}}


class Variadic:
    """Undeclared linked inputs arrive as keyword arguments."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"first": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, first, **others):
        _log("Variadic", first=first, others=sorted(others))
        return (first + sum(others.values()),)


class MyType(str):
    """A pack type whose `__ne__` matches anything (the common AnyType trick)."""

    def __ne__(self, other):
        return False


class AnyOut:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = (MyType("ANYTHING"),)
    FUNCTION = "run"

    def run(self, value):
        return (value,)


class FloatSink:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("FLOAT,INT",)}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, value):
        return {"ui": {"value": [value]}}


class StringSink:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("STRING",)}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, value):
        return {"ui": {"value": [value]}}


class Progress:
    """Reports progress through the engine's context and checks for interrupts."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"steps": ("INT", {"default": 3})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, steps):
        from graph.context import current

        ctx = current()
        for i in range(steps):
            ctx.progress(i + 1, steps)
        return (steps,)


class BrokenInputTypes:
    @classmethod
    def INPUT_TYPES(cls):
        raise RuntimeError("INPUT_TYPES is broken")

    RETURN_TYPES = ()
    FUNCTION = "run"

    def run(self):
        return ()


NODE_CLASS_MAPPINGS = {
    "IntConst": IntConst, "Add": Add, "Collect": Collect, "Fail": Fail, "Choose": Choose, "Even": Even,
    "AnyTypeCheck": AnyTypeCheck, "KwargsValidate": KwargsValidate, "RaisingValidate": RaisingValidate,
    "Changing": Changing, "Fingerprint": Fingerprint, "BadFingerprint": BadFingerprint, "Counter": Counter,
    "Hidden": Hidden, "Variadic": Variadic, "AnyOut": AnyOut, "FloatSink": FloatSink, "StringSink": StringSink,
    "Progress": Progress, "BrokenInputTypes": BrokenInputTypes,
}
NODE_DISPLAY_NAME_MAPPINGS = {"IntConst": "Integer constant", "Add": "Add integers"}
