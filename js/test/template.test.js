import { test } from "node:test";
import assert from "node:assert/strict";
import { codePointLabel, templatePieces } from "../src/templateview.js";

test("marks cut the template at code points, the most severe mark winning where they overlap", () => {
  const text = "ab😀cd{{ x.__class__ }}ef";
  const marks = [{ start: 5, end: 22, severity: "warning" }, { start: 8, end: 19, severity: "error" }];
  const pieces = templatePieces(text, marks);
  assert.equal(pieces.map((p) => p.text).join(""), text); // nothing lost, the emoji counted once
  assert.deepEqual(pieces.map((p) => [p.text, p.mark && p.mark.severity]), [
    ["ab😀cd", null], ["{{ ", "warning"], ["x.__class__", "error"], [" }}", "warning"], ["ef", null]]);
});

test("invisible, control and bidi characters are drawn by their code point", () => {
  const tags = "\u{E0041}\u{E0067}";
  const pieces = templatePieces(`a\u200b${tags}b\u202ec\n\td\u0007`);
  assert.deepEqual(pieces.map((p) => [p.text, p.invisible]), [
    ["a", false], ["⟨U+200B⟩", true], ["⟨U+E0041⟩", true], ["⟨U+E0067⟩", true], ["b", false], ["⟨U+202E⟩", true],
    ["c\n\td", false], ["⟨U+0007⟩", true]]);
  assert.equal(codePointLabel("\u{E007F}"), "⟨U+E007F⟩");
});

test("a template with no marks and nothing hidden is one piece", () => {
  assert.deepEqual(templatePieces("{% for m in messages %}é{% endfor %}"), [
    { text: "{% for m in messages %}é{% endfor %}", mark: null, invisible: false }]);
});
