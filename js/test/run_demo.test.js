import { test } from "node:test";
import assert from "node:assert/strict";
import {
  backendCells,
  agreementLabel, agreementSpans, formatBytes, formatPerplexity, formatSeconds, formatTps,
  progressFraction, statusLine,
} from "../src/run_demo.js";

test("tokens/s: one decimal below 100, none above, empty before a rate exists", () => {
  assert.equal(formatTps(12.345), "12.3 tokens/s");
  assert.equal(formatTps(250.4), "250 tokens/s");
  assert.equal(formatTps(0), "");
  assert.equal(formatTps(Infinity), "");
  assert.equal(formatTps(undefined), "");
});

test("bytes, seconds and perplexity format for people", () => {
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(98362432), "93.8 MiB");
  assert.equal(formatBytes(3 * 2 ** 30), "3.0 GiB");
  assert.equal(formatSeconds(0.0123), "12 ms");
  assert.equal(formatSeconds(2.5), "2.50 s");
  assert.equal(formatPerplexity(26.03141), "26.031");
  assert.equal(formatPerplexity(null), "n/a");
});

test("progress is a fraction, or null (indeterminate) without a total", () => {
  assert.equal(progressFraction({ done: 3, total: 12 }), 0.25);
  assert.equal(progressFraction({ done: 20, total: 12 }), 1);
  assert.equal(progressFraction({ done: 0, total: 0 }), null);
  assert.equal(progressFraction({}), null);
  assert.equal(progressFraction(undefined), null);
});

test("agreement marks each token against the reference at the same position", () => {
  const spans = agreementSpans([5, 6, 7, 9], [" Paris", ".", "\n", "!"], [5, 6, 8]);
  assert.deepEqual(spans, [
    { text: " Paris", same: true }, { text: ".", same: true },
    { text: "\n", same: false }, { text: "!", same: false },
  ]);
  assert.deepEqual(agreementSpans([], [], [1, 2]), []);
});

test("agreement label says how many agree and how long the shared prefix is", () => {
  assert.equal(agreementLabel({ matches: 16, total: 16, prefix: 16 }), "all 16 tokens agree");
  assert.equal(agreementLabel({ matches: 10, total: 16, prefix: 4 }), "10/16 tokens agree, first 4 identical");
  assert.equal(agreementLabel({ matches: 0, total: 0, prefix: 0 }), "no tokens");
  assert.equal(agreementLabel(undefined), "");
});

test("status line names the source and the state", () => {
  assert.equal(statusLine("idle", "model.gguf"), "model.gguf: ready");
  assert.equal(statusLine("loading", "m"), "m: loading the model"); // llama.cpp dequantizes nothing
  assert.equal(statusLine("weird", "m"), "m: weird");
});

test("backend rows say what each backend reads per token and how close it gets to the cap", () => {
  const cells = backendCells({ backend: "llama.cpp", load_s: 0.21, prefill_tps: 66.8, decode_tps: 38.4,
    weight_bytes_per_token: 97 * 2 ** 20, cap_tps: 160.2, share_of_cap: 0.24, peak_rss: 173 * 2 ** 20,
    agrees_with_numpy: "16/16" });
  assert.deepEqual(cells, ["llama.cpp", "210 ms", "66.8", "38.4", "97.0 MiB", "160.2", "24%", "173.0 MiB", "16/16"]);
  assert.equal(backendCells({ backend: "numpy" })[6], "-");
  // A CUDA row names its device and shows the accelerator's peak, with no CPU bandwidth cap.
  const gpu = backendCells({ backend: "torch", device: "cuda (NVIDIA H100, torch, int4 weight-only)",
    peak_rss: 2 ** 30, peak_memory: 2 ** 20, cap_tps: null });
  assert.equal(gpu[0], "torch (cuda)");
  assert.equal(gpu[5], "-");
  assert.equal(gpu[7], formatBytes(2 ** 20));
});
