import { test } from "node:test";
import assert from "node:assert/strict";
import { parseTokenId, visibleToken } from "../src/vocabview.js";

test("a token shows its control characters as escapes, and a missing one says so", () => {
  assert.equal(visibleToken("a\n\tb"), "a\\n\\tb");
  assert.equal(visibleToken("\u0000\u001b\u007f"), "\\x00\\x1b\\x7f");
  assert.equal(visibleToken("Ġhello <b>"), "Ġhello <b>"); // text, never markup: shown as it is
  assert.equal(visibleToken(null), "(no token)");
});

test("the jump box takes an id within the vocabulary", () => {
  assert.deepEqual(parseTokenId(" 149,999 ", 150_000), { id: 149_999 });
  assert.deepEqual(parseTokenId("0", 150_000), { id: 0 });
  assert.match(parseTokenId("150000", 150_000).error, /0 to 149,999/);
  assert.match(parseTokenId("-3", 10).error, /digits/);
  assert.match(parseTokenId("abc", 10).error, /digits/);
  assert.deepEqual(parseTokenId("12", 0), { id: 12 }); // length not known yet: checked again later
});
