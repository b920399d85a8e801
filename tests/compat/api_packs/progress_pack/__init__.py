"""A fixture pack that reports progress through ComfyUI's `comfy_execution.progress` registry, as
packs written for ComfyUI's progress API do: a handler of its own added with
`add_progress_handler`, and `get_progress_state().update_progress(unique_id, value, max)` from its
node (also for an id that is not the running node's)."""
from comfy_execution.progress import NodeState, ProgressHandler, add_progress_handler, get_progress_state


class RecordingHandler(ProgressHandler):
    def __init__(self):
        super().__init__("progress_pack")
        self.calls = []

    def start_handler(self, node_id, state, prompt_id):
        self.calls.append(("start", node_id, prompt_id, state["state"]))

    def update_handler(self, node_id, value, max_value, state, prompt_id, image=None):
        self.calls.append(("update", node_id, prompt_id, value, max_value, state["state"]))

    def finish_handler(self, node_id, state, prompt_id):
        self.calls.append(("finish", node_id, prompt_id, state["value"]))


HANDLER = RecordingHandler()


class StepsWithProgress:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "progress_pack"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"steps": ("INT", {"default": 4})}, "hidden": {"unique_id": "UNIQUE_ID"}}

    def run(self, steps, unique_id):
        add_progress_handler(HANDLER)
        registry = get_progress_state()
        registry.start_progress("elsewhere")
        for i in range(1, steps):
            registry.update_progress(unique_id, i, steps)
        registry.update_progress("elsewhere", 1, 2)  # not the running node: the handlers only
        registry.finish_progress("elsewhere")
        assert registry.nodes["elsewhere"]["state"] is NodeState.Finished
        return (steps,)


NODE_CLASS_MAPPINGS = {"PP_StepsWithProgress": StepsWithProgress}
