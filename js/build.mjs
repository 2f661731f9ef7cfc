// Bundles each widget entry in src/ into model_explorer/widgets/static/ as one ES module.
import { build } from "esbuild";
import { readdirSync } from "node:fs";

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
