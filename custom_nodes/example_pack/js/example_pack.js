// Loaded by the browser editor from /extensions/example_pack/example_pack.js (WEB_DIRECTORY).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

app.registerExtension({
  name: "example_pack.notifications",
  async setup() {
    // The custom WebSocket event sent by ExampleInvertImage (PromptServer.instance.send_sync).
    api.addEventListener("example_pack.inverted", (event) => {
      console.log(`example_pack: node ${event.detail.node} inverted ${event.detail.count} image(s)`);
    });
  },
});
