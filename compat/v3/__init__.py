"""ComfyUI's V3 node API (`comfy_api.latest`): io schema, ui helpers, extensions, and the
adapter that turns an `io.ComfyNode` class into a `NodeSpec` (the third way in, next to native
declarations and V1 classes)."""
