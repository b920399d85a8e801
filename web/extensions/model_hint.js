// SPDX-License-Identifier: MIT
// comfy-engine frontend extension: when the server has no checkpoint at all, say where to put
// one (and how to make the tiny demo checkpoint) instead of leaving the loader showing
// "undefined". It asks the server's model library once, after the editor has started.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const EXTENSION_NAME = "comfy-engine.ModelHint";

async function modelCount(folder) {
  const response = await api.fetchApi(`/experiment/models/${folder}`);
  if (!response.ok) return null; // an older server: say nothing
  const files = await response.json();
  return Array.isArray(files) ? files.length : null;
}

app.registerExtension({
  name: EXTENSION_NAME,
  async setup() {
    try {
      const [checkpoints, diffusionModels] = await Promise.all([modelCount("checkpoints"),
                                                                modelCount("diffusion_models")]);
      if (checkpoints !== 0 || diffusionModels !== 0) return;
      const folders = (await (await api.fetchApi("/experiment/models")).json())
        .find((entry) => entry.name === "checkpoints")?.folders ?? ["models/checkpoints"];
      app.extensionManager.toast.add({
        severity: "warn",
        summary: "No checkpoints yet",
        detail: `Put a .safetensors checkpoint in ${folders[0]} and press R to refresh, or make the tiny `
          + `random demo one: .venv/bin/python -m tests.fixtures.checkpoints ${folders[0]}`,
      });
    } catch (error) {
      console.error(`${EXTENSION_NAME}:`, error);
    }
  },
});
