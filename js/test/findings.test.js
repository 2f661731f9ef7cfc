import { test } from "node:test";
import assert from "node:assert/strict";
import { groupFindings, layerOrigin } from "../src/findingsview.js";

test("layer findings say which statistics they come from", () => {
  assert.equal(layerOrigin([{ statistics: "sampled", stat: "norm" }, { statistics: "sampled", stat: "norm" }]), "sampled norm statistics");
  assert.equal(layerOrigin([{ statistics: "exact", stat: "absmax" }]), "exact absmax statistics");
});

test("findings group by severity, unknown severities as info, order kept", () => {
  const g = groupFindings([{ severity: "warning", code: "a" }, { severity: "odd", code: "b" }, { severity: "warning", code: "c" }]);
  assert.deepEqual(g.warning.map((f) => f.code), ["a", "c"]);
  assert.deepEqual(g.info.map((f) => f.code), ["b"]);
  assert.deepEqual(g.error, []);
});
