import { test } from "node:test";
import assert from "node:assert/strict";

test("js tests run", () => {
  assert.equal(1 + 1, 2);
});
