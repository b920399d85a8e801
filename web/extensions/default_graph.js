// SPDX-License-Identifier: MIT
// comfy-engine frontend extension: the editor's "default graph" becomes this server's default
// text-to-image workflow (default_workflow.json next to this file).
//
// ComfyUI's editor loads its built-in default graph (made of ComfyUI's own nodes) whenever
// `app.loadGraphData()` is called without a graph (first start, no saved workflow) or with
// the built-in `defaultGraph` object ("Load Default"). We wrap `app.loadGraphData` and
// substitute our workflow in exactly those two cases; every other call passes through
// untouched. The editor itself is never modified.
import { app } from "../../scripts/app.js";

const EXTENSION_NAME = "comfy-engine.DefaultGraph";
const WORKFLOW_URL = new URL("./default_workflow.json", import.meta.url);

let workflowPromise = null;

/** Our default workflow (UI format), fetched once; each caller gets its own copy. */
async function defaultWorkflow() {
  if (workflowPromise === null) {
    workflowPromise = fetch(WORKFLOW_URL, { cache: "no-cache" }).then((response) => {
      if (!response.ok) {
        throw new Error(`${EXTENSION_NAME}: GET ${WORKFLOW_URL} answered ${response.status}`);
      }
      return response.json();
    });
    // A failed fetch is retried on the next call rather than cached forever.
    workflowPromise.catch(() => { workflowPromise = null; });
  }
  return structuredClone(await workflowPromise);
}

/** True when the editor is about to load its own built-in default graph. */
function wantsBuiltInDefault(graphData) {
  if (!graphData || typeof graphData !== "object" || Array.isArray(graphData)) {
    return true; // the editor's own rule for "no graph given": it falls back to defaultGraph
  }
  const builtIn = window.comfyAPI?.defaultGraph?.defaultGraph;
  return builtIn !== undefined && graphData === builtIn;
}

const originalLoadGraphData = app.loadGraphData.bind(app);

app.loadGraphData = async function loadGraphData(graphData, ...rest) {
  if (wantsBuiltInDefault(graphData)) {
    try {
      graphData = await defaultWorkflow();
    } catch (error) {
      // Without our workflow the editor still works; it shows its own default instead.
      console.error(error);
    }
  }
  return originalLoadGraphData(graphData, ...rest);
};

app.registerExtension({ name: EXTENSION_NAME });
