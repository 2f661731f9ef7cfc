// Front ends other than JupyterLab (Notebook 7, VS Code, Colab, marimo) define none of
// JupyterLab's CSS variables: every var(--jp-...) in our styles names a fallback.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";

import { drawsIpywidgets } from "../src/childwidget.js";

test("every JupyterLab CSS variable has a fallback", () => {
  for (const name of readdirSync(new URL("../src/", import.meta.url)).filter((f) => f.endsWith(".css"))) {
    const css = readFileSync(new URL(`../src/${name}`, import.meta.url), "utf8");
    const bare = [...css.matchAll(/var\(\s*(--jp-[\w-]+)\s*\)/g)].map((m) => m[1]);
    assert.deepEqual(bare, [], `${name}: var() without a fallback`);
  }
});

test("the sources name no JupyterLab or Lumino class", () => {
  for (const name of readdirSync(new URL("../src/", import.meta.url)).filter((f) => f.endsWith(".js"))) {
    const js = readFileSync(new URL(`../src/${name}`, import.meta.url), "utf8").replace(/\/\/.*$/gm, "");
    assert.doesNotMatch(js, /["'`.]\s*(jp|lm)-[A-Z]/, name);
  }
});

test("ipywidgets are drawn only where a widget manager is", () => {
  assert.equal(drawsIpywidgets({}), false);  // marimo
  assert.equal(drawsIpywidgets({ widget_manager: { get_model() {}, create_view() {} } }), true);
});
