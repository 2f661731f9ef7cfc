// Bundles each widget entry in src/ into model_explorer/widgets/static/ as one ES module.
import { build } from "esbuild";
import { copyFileSync, readdirSync } from "node:fs";

const entries = readdirSync("src").filter((f) => f.endsWith("_widget.js")).map((f) => `src/${f}`);
await build({
  entryPoints: entries,
  bundle: true,
  format: "esm",
  minify: true,
  outdir: "../model_explorer/widgets/static",
  entryNames: "[name]",
  logLevel: "warning",
});

// The Graph tab's layout engine: elkjs's worker build, sent to the browser only when the tab
// opens (widgets/_graph.py "graph_engine") and run there in a Blob-URL worker.
copyFileSync("node_modules/elkjs/lib/elk-worker.min.js", "../model_explorer/widgets/static/elk_worker.js");
