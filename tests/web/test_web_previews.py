"""Preview frames on the WebSocket are scaled to fit the preview size, small ones enlarged, as
ComfyUI's server does (`ImageOps.contain`, bilinear)."""
from __future__ import annotations

import io

from PIL import Image

from tests.web.web_harness import chain, collect_until_done, ws_connect
from web.protocol import encode_image, parse_binary_frame


def test_small_previews_are_enlarged_to_fit_and_big_ones_shrunk():
    small = Image.open(io.BytesIO(encode_image(Image.new("RGB", (8, 4), (200, 10, 10)), "JPEG", 512)))
    assert small.size == (512, 256)
    big = Image.open(io.BytesIO(encode_image(Image.new("RGB", (1000, 600)), "PNG", 512)))
    assert big.size == (512, 307)
    assert Image.open(io.BytesIO(encode_image(Image.new("RGB", (8, 4)), "PNG", None))).size == (8, 4)


async def test_preview_frames_reach_the_client_at_the_preview_size(server):
    ws, _ = await ws_connect(server, "pv")
    _, body = await server.post_prompt(chain(1, steps=2, preview=1), client_id="pv")
    frames = [f for f in await collect_until_done(ws, body["prompt_id"]) if isinstance(f, bytes)]
    await ws.close()
    assert len(frames) == 2
    for frame in frames:
        kind, (fmt, data) = parse_binary_frame(frame)
        assert (kind, fmt) == (1, 1)
        assert Image.open(io.BytesIO(data)).size == (512, 256)  # the node sent 16x8 with max_size 512
