"""ComfyUI's `comfy_api_nodes` package for node packs: only `comfy_api_nodes.util`'s download
helpers and what they raise (compat/api_nodes_download.py). ComfyUI's partner API nodes, their
request models (`apis`) and its Comfy API client (`util.client`: `ApiEndpoint`, `sync_op`,
`poll_op`, the upload helpers) are not provided."""
