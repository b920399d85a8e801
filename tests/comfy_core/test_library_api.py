"""docs/models.md's "runtime as a library" snippet works as written (no server, no graph)."""

import torch


def test_notebook_style_text_to_image(tiny_sd1_ckpt):
    from comfy_core import load_checkpoint
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    model, clip, vae = load_checkpoint(tiny_sd1_ckpt)

    def encode(text):
        cond, pooled = clip.encode_from_tokens(clip.tokenize(text), return_pooled=True)
        return [[cond, {"pooled_output": pooled}]]

    latent = torch.zeros(1, 4, 8, 8)
    noise = prepare_noise(latent, seed=42)
    samples = sample(model, noise, 2, 7.0, "euler", "normal", encode("a lighthouse"), encode("blurry"),
                     latent, denoise=1.0)
    image = vae.decode(samples)
    assert image.shape == (1, 64, 64, 3)
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    again = sample(model, noise, 2, 7.0, "euler", "normal", encode("a lighthouse"), encode("blurry"),
                   latent, denoise=1.0)
    assert torch.equal(samples, again)  # same seed, same result
