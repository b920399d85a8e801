"""V1 nodes for control flow: lazy inputs, expansion, blockers, lists, async."""
import asyncio

from graph.expansion import ExecutionBlocker, GraphBuilder

from .nodes_basic import _log


class LazySwitch:
    """Evaluates only the branch it picks (lazy inputs with check_lazy_status)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"switch": ("BOOLEAN",), "on_true": ("*", {"lazy": True}),
                             "on_false": ("*", {"lazy": True})}}

    RETURN_TYPES = ("*",)
    FUNCTION = "run"

    def check_lazy_status(self, switch, on_true=None, on_false=None):
        _log("LazySwitch.check", switch=switch, on_true=on_true, on_false=on_false)
        if switch and on_true is None:
            return ["on_true"]
        if not switch and on_false is None:
            return ["on_false"]
        return []

    def run(self, switch, on_true=None, on_false=None):
        return (on_true if switch else on_false,)


class LazyBoth:
    """Asks for its lazy inputs one at a time (check_lazy_status is called repeatedly)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT", {"lazy": True}), "b": ("INT", {"lazy": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def check_lazy_status(self, a=None, b=None):
        _log("LazyBoth.check", a=a, b=b)
        if a is None:
            return ["a"]
        if b is None:
            return ["b"]
        return []

    def run(self, a, b):
        return (a + b,)


class AsyncLazy:
    """An async check_lazy_status: awaited like a sync one."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT", {"lazy": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    async def check_lazy_status(self, a=None):
        await asyncio.sleep(0)
        _log("AsyncLazy.check", a=a)
        return ["a"] if a is None else []

    def run(self, a):
        return (a * 2,)


class LazyAsksUnconnected:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": ("INT",)}, "optional": {"extra": ("INT", {"lazy": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def check_lazy_status(self, a, extra=None):
        return ["extra"]

    def run(self, a, extra=None):
        return (a,)


class Repeat:
    """Expands into a chain of `count` Add nodes adding `step` to `value`."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "count": ("INT", {"default": 2, "min": 1}),
                             "step": ("INT", {"default": 1})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value, count, step):
        _log("Repeat", value=value, count=count)
        graph = GraphBuilder()
        current = value
        for _ in range(count):
            node = graph.node("Add", a=current, b=step)
            current = node.out(0)
        return {"result": (current,), "expand": graph.finalize()}


class ExpandCollect:
    """Expands into an output node (which must then run) and returns a constant."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value):
        graph = GraphBuilder()
        graph.node("Collect", value=value)
        return {"result": (value,), "expand": graph.finalize()}


class ExpandCycle:
    """Expands into a subgraph that depends on the expanding node itself: a cycle."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}, "hidden": {"unique_id": "UNIQUE_ID"}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value, unique_id):
        graph = GraphBuilder()
        node = graph.node("Add", a=[unique_id, 0], b=1)
        return {"result": (node.out(0),), "expand": graph.finalize()}


class ExpandDuplicate:
    """Expands into a node whose id already exists in the prompt."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "existing": ("STRING",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value, existing):
        return {"result": (value,), "expand": {existing: {"class_type": "IntConst", "inputs": {"value": 1}}}}


class MixedExpand:
    """Per list element: a plain tuple for even values, an expansion for odd ones."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value):
        if value % 2 == 0:
            return (value,)
        graph = GraphBuilder()
        node = graph.node("Add", a=value, b=100)
        return {"result": (node.out(0),), "expand": graph.finalize()}


class AsyncExpand:
    """An async node that expands."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    async def run(self, value):
        await asyncio.sleep(0.01)
        graph = GraphBuilder()
        node = graph.node("Add", a=value, b=1000)
        return {"result": (node.out(0),), "expand": graph.finalize(), "ui": {"expanded": [value]}}


class Gate:
    """Passes `value`, or blocks it (silently or with a message)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("*",), "mode": (["pass", "block", "block_message"],)}}

    RETURN_TYPES = ("*",)
    FUNCTION = "run"

    def run(self, value, mode):
        if mode == "pass":
            return (value,)
        return (ExecutionBlocker("gate closed" if mode == "block_message" else None),)


class GateEven:
    """Blocks odd list elements only."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value):
        return (value if value % 2 == 0 else ExecutionBlocker(None),)


class MakeList:
    """OUTPUT_IS_LIST: outputs 0..count-1 as a list consumed element by element downstream."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"count": ("INT", {"default": 3})}}

    RETURN_TYPES = ("INT", "INT")
    OUTPUT_IS_LIST = (True, False)
    FUNCTION = "run"

    def run(self, count):
        return (list(range(count)), count)


class SumList:
    """INPUT_IS_LIST: receives whole lists in one call."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"values": ("INT",), "offset": ("INT", {"default": 0})}}

    RETURN_TYPES = ("INT",)
    INPUT_IS_LIST = True
    FUNCTION = "run"

    def run(self, values, offset):
        _log("SumList", values=values, offset=offset)
        return (sum(values) + offset[0],)


class ListCollect:
    """An output node called once per list element; its UI outputs are merged."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("*",), "tag": ("STRING", {"default": ""})}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, value, tag):
        _log("ListCollect", value=value, tag=tag)
        return {"ui": {"values": [value], "tags": [tag]}}


class AsyncWait:
    """An async node: sleeps, then returns its value; records start/end order."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "seconds": ("FLOAT", {"default": 0.05})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    async def run(self, value, seconds):
        _log("AsyncWait.start", value=value)
        await asyncio.sleep(seconds)
        _log("AsyncWait.end", value=value)
        return (value,)


class AsyncFail:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    async def run(self, value):
        await asyncio.sleep(0.01)
        raise RuntimeError("async failure")


class AsyncValidate:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    async def VALIDATE_INPUTS(cls, value):
        await asyncio.sleep(0)
        return value != 13 or "unlucky"

    @classmethod
    async def IS_CHANGED(cls, value):
        return value

    def run(self, value):
        return (value,)


class Loop:
    """Tail-recursive loop by expansion: re-expands itself until `remaining` is 0."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "remaining": ("INT",)}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value, remaining):
        if remaining <= 0:
            return (value,)
        graph = GraphBuilder()
        add = graph.node("Add", a=value, b=1)
        again = graph.node("Loop", value=add.out(0), remaining=remaining - 1)
        return {"result": (again.out(0),), "expand": graph.finalize()}


class RawLink:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"rawLink": True})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value):
        _log("RawLink", value=value)
        graph = GraphBuilder()
        node = graph.node("Add", a=value, b=100)
        return {"result": (node.out(0),), "expand": graph.finalize()}


NODE_CLASS_MAPPINGS = {
    "LazySwitch": LazySwitch, "LazyBoth": LazyBoth, "LazyAsksUnconnected": LazyAsksUnconnected,
    "AsyncLazy": AsyncLazy,
    "Repeat": Repeat, "MixedExpand": MixedExpand, "AsyncExpand": AsyncExpand, "ExpandCollect": ExpandCollect, "ExpandCycle": ExpandCycle,
    "ExpandDuplicate": ExpandDuplicate, "Gate": Gate, "GateEven": GateEven, "MakeList": MakeList,
    "SumList": SumList, "ListCollect": ListCollect, "AsyncWait": AsyncWait, "AsyncFail": AsyncFail,
    "AsyncValidate": AsyncValidate, "Loop": Loop, "RawLink": RawLink,
}
