"""Check cells for the course's exercises: `check_08(layer=12, module=..., tensor=...)` says, part
by part, whether an answer is right and gives a hint when it is not; it never prints the answer.

    from course_checks import check_08
    check_08(layer=None, module=None, tensor=None)   # fill in your answer, run the cell

Each check prints; it returns nothing, so a cell shows only the verdict. The expected values are the faults and facts
each lesson planted (its solution cell calls the same check on what it computed, so running a
notebook shows the two agree); lesson 00's are read from the bundled sample file itself.
`EXERCISES` lists the checks of each notebook, in the order of its exercises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class Part:
    """One part of an answer: its name, the expected value, how to compare, a hint if wrong."""

    name: str
    expected: Any
    hint: str
    same: Callable[[Any, Any], bool] = lambda given, expected: given == expected


def _text(value: Any) -> str:
    return str(value).strip().strip("'\"`").strip().lower()


def same_text(given: Any, expected: Any) -> bool:
    """Names compare without case, quotes or surrounding spaces."""
    return _text(given) == _text(expected)


def one_of(*accepted: str) -> Callable[[Any, Any], bool]:
    return lambda given, _expected: _text(given) in {_text(a) for a in accepted}


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).replace(",", "").replace("_", "").strip(), 0)
    except ValueError:
        return None


def same_int(given: Any, expected: Any) -> bool:
    """Integers may be written 1785664, "1,785,664" or "0x1b3f40"."""
    return _integer(given) == expected


def same_bytes(given: Any, expected: bytes) -> bool:
    """bytes, or hex text with or without spaces ("01 00 00 00")."""
    if isinstance(given, (bytes, bytearray)):
        return bytes(given) == expected
    try:
        return bytes.fromhex(str(given).replace(" ", "")) == expected
    except ValueError:
        return False


def same_set(given: Any, expected: Iterable[str]) -> bool:
    """A list of names in any order, or one name when one is expected."""
    items = [given] if isinstance(given, str) else list(given) if isinstance(given, Iterable) else [given]
    return sorted(_text(i) for i in items) == sorted(_text(e) for e in expected)


def same_ints(given: Any, expected: Iterable[int]) -> bool:
    try:
        return [_integer(g) for g in given] == list(expected)
    except TypeError:
        return False


def judge(title: str, parts: list[Part], answers: dict[str, Any]) -> bool:
    """Print, part by part, right / not yet (with the hint) / not answered; True when all right."""
    lines, right = [], 0
    for part in parts:
        given = answers.get(part.name)
        if given is None or given is Ellipsis:
            lines.append(f"  ?  {part.name}: not answered yet (fill in {part.name}=...)")
        elif part.same(given, part.expected):
            right += 1
            lines.append(f"  ✓  {part.name}: right")
        else:
            lines.append(f"  ✗  {part.name}: not yet. Hint: {part.hint}")
    verdict = "all right, well done" if right == len(parts) else f"{right} of {len(parts)} right"
    print(f"{title}: {verdict}")
    print("\n".join(lines))
    return right == len(parts)


# -- the exercises, lesson by lesson -------------------------------------------------------------


def check_00(tensor: Any = None, nbytes: Any = None, data_start: Any = None) -> None:
    """Lesson 00: the Q8_0 tensor of the sample, its size in bytes, where the data section starts."""
    import model_explorer as mx
    from model_explorer.samples import sample_path

    with mx.open(sample_path()) as ckpt:
        q8 = [t for t in ckpt.tensors.values() if t.dtype == "Q8_0"]
        start = min(t.offset for t in ckpt.tensors.values())
    judge("Exercise 00", [
        Part("tensor", [t.name for t in q8], "filter ckpt.tensors.values() on t.dtype == 'Q8_0'.", same_set),
        Part("nbytes", sum(t.length for t in q8), "a tensor record's length is its size in the file, in bytes.",
             same_int),
        Part("data_start", start, "the data section starts with the first tensor's data: the smallest offset.",
             same_int),
    ], dict(tensor=tensor, nbytes=nbytes, data_start=data_start))


def check_01(tensor: Any = None, data_offsets: Any = None) -> None:
    """Lesson 01: which header entry the writer got wrong, and the data_offsets it should have."""
    judge("Exercise 01", [
        Part("tensor", "bias", "the data_overlap finding names the entry that starts inside another one.", same_text),
        Part("data_offsets", [24, 30], "a tensor's data starts where the previous one ends; keep its length.",
             same_ints),
    ], dict(tensor=tensor, data_offsets=data_offsets))


def check_02(block_count_at: Any = None, block_count_bytes: Any = None, first_type: Any = None,
             scale_at: Any = None) -> None:
    """Lesson 02: the value of llama.block_count in small.gguf; SmolLM2's first tensor and its first scale."""
    judge("Exercise 02", [
        Part("block_count_at", 144, "find the span whose path ends in 'llama.block_count > value'; the key and "
             "its type come before it.", same_int),
        Part("block_count_bytes", bytes([1, 0, 0, 0]), "a uint32 is 4 bytes, little-endian: read them with "
             "raw[offset:end].", same_bytes),
        Part("first_type", "Q8_0", "the first entry of smol.tensors; its dtype is the ggml type's name.", same_text),
        Part("scale_at", 1_785_664, "a block of that type starts with its fp16 scale, and the first block starts at the "
             "tensor's offset.", same_int),
    ], dict(block_count_at=block_count_at, block_count_bytes=block_count_bytes, first_type=first_type,
            scale_at=scale_at))


def check_03_sneaky(function: Any = None, argument: Any = None, byte: Any = None) -> None:
    """Lesson 03, first exercise: what the protocol-4 pickle would call, with what, and where it imports."""
    judge("Exercise 03 (STACK_GLOBAL)", [
        Part("function", "os.system", "the two strings pushed before STACK_GLOBAL are the module and the name "
             "(os is called posix on Linux).", one_of("os.system", "posix.system", "nt.system")),
        Part("argument", "echo this never runs", "the string pushed after the import is the call's argument.",
             same_text),
        Part("byte", 28, "the offset printed left of STACK_GLOBAL in pickletools.dis.", same_int),
    ], dict(function=function, argument=argument, byte=byte))


def check_03_chained(verdict: Any = None, callables: Any = None) -> None:
    """Lesson 03, second exercise: the verdict on the attrgetter chain and the callables it names."""
    judge("Exercise 03 (attrgetter)", [
        Part("verdict", "dangerous", "does the chain end in a call of a function that runs a shell command?",
             same_text),
        Part("callables", ["operator.attrgetter", "glob.os"], "one per error finding: "
             "finding.extra['callable'] for finding in ckpt.errors.", same_set),
    ], dict(verdict=verdict, callables=callables))


LOST_TENSORS = ["model.layers.3.self_attn.q_proj.weight", "model.layers.3.mlp.up_proj.weight",
                "model.layers.3.input_layernorm.weight", "model.norm.weight"]


def check_04(shard: Any = None, tensors: Any = None, first_at: Any = None) -> None:
    """Lesson 04: the deleted shard, the tensors lost with it, and the byte of the index naming the first."""
    judge("Exercise 04", [
        Part("shard", "model-00003-of-00003.safetensors", "the missing_shard finding names the file.", same_text),
        Part("tensors", LOST_TENSORS, "every name the index's weight_map sends to that file.", same_set),
        Part("first_at", 857, "the finding's byte offset points into model.safetensors.index.json.", same_int),
    ], dict(shard=shard, tensors=tensors, first_at=first_at))


def check_05(block: Any = None) -> None:
    """Lesson 05: the Q4_0 block of the matrix with the largest error."""
    judge("Exercise 05", [
        Part("block", 83, "sort ckpt.blocks('q4_0', reference=W, count=W.size // 32).table() by max_abs_error; "
             "a block is 32 consecutive values of W, row by row.", same_int),
    ], dict(block=block))


def check_06(start: Any = None, end: Any = None, field: Any = None, was: Any = None, now: Any = None) -> None:
    """Lesson 06: the overwritten field of mystery.gguf: its bytes, its name, its value before and after."""
    judge("Exercise 06", [
        Part("start", 169, "the error finding names the tensor; step through its tensor info in the hexdump.", same_int),
        Part("end", 173, "the field is a uint32: its end is 4 bytes after its start.", same_int),
        Part("field", "type", "the finding says what it could not read about tensor 'b': name that field of its tensor info.",
             one_of("type", "ggml type", "tensor 1 > b > type", "b > type")),
        Part("was", 0, "compare the same bytes of the undamaged small.gguf (the number, or its name).",
             one_of("0", "f32", "type 0")),
        Part("now", 200, "read the four bytes as a little-endian uint32.", same_int),
    ], dict(start=start, end=end, field=field, was=was, now=now))


def check_07(same: Any = None, scale_row: Any = None) -> None:
    """Lesson 07: do the sliced rows equal the full read's, and which block-scale row do they use?"""
    judge("Exercise 07", [
        Part("same", True, "np.array_equal(part, ck8.read(name)[130:136]).", lambda g, e: g is e),
        Part("scale_row", 1, "a scale covers a block of B x B values: row r uses scale row r // B.", same_int),
    ], dict(same=same, scale_row=scale_row))


def check_08(layer: Any = None, module: Any = None, tensor: Any = None) -> None:
    """Lesson 08: where compare_runs puts the first divergence of the bad merge."""
    judge("Exercise 08", [
        Part("layer", 12, "the runs are identical up to the first layer that reads the copied bytes.", same_int),
        Part("module", "ffn_out", "which named point of a layer is the first computed from the MLP's down "
             "projection? (the module names are in the lesson's heatmap columns)", same_text),
        Part("tensor", "blk.12.ffn_down.weight", "the weight whose bytes were overwritten, by its GGUF name.",
             same_text),
    ], dict(layer=layer, module=module, tensor=tensor))


def check_09(module: Any = None) -> None:
    """Lesson 09: where a Gemma read as Llama first diverges."""
    judge("Exercise 09", [
        Part("module", "embed", "which of Gemma's differences acts before any layer runs?", same_text),
    ], dict(module=module))


def check_10(module: Any = None, tensor: Any = None, kind: Any = None) -> None:
    """Lesson 10: the first divergence of the doubled attn_v scales, and whether it is a jump or a drift."""
    judge("Exercise 10", [
        Part("module", "v", "the first point computed from the changed weight, with the trace's module names.",
             same_text),
        Part("tensor", "blk.2.attn_v.weight", "the tensor whose block scales you doubled.", same_text),
        Part("kind", "jump", "read d2.verdict['kind'], and ask whether the points before layer 2 agreed exactly.",
             same_text),
    ], dict(module=module, tensor=tensor, kind=kind))


def check_11(code: Any = None, offset: Any = None) -> None:
    """Lesson 11: the finding that names the length gate, and its byte in tokenizer_config.json."""
    judge("Exercise 11", [
        Part("code", "chat_template_gate", "list (f.code, f.offset) of the findings whose code starts with "
             "'chat_template'; one names a condition, one the text it adds.", same_text),
        Part("offset", 131, "the finding's offset, a byte of tokenizer_config.json.", same_int),
    ], dict(code=code, offset=offset))


def check_12(op: Any = None, orientation: Any = None) -> None:
    """Lesson 12: the operator that reads layer 0's q_proj in the ONNX export, and how it stores it."""
    judge("Exercise 12", [
        Part("op", "MatMul", "the `op` column of the node in the scope layers.0/self_attn/q_proj that reads a weight.",
             same_text),
        Part("orientation", "transposed", "compare the stored array with the safetensors weight, and with its .T.",
             one_of("transposed", "transpose", "as the transpose")),
    ], dict(op=op, orientation=orientation))


def check_13(layer: Any = None, module: Any = None, kind: Any = None) -> None:
    """Lesson 13: where a scaled FFN output weight in an ONNX export first shows, and how."""
    judge("Exercise 13", [
        Part("layer", 1, "which layer's weight did you scale? Nothing before it reads it.", same_int),
        Part("module", "ffn_out", "the first point computed from the changed weight, with the run's module names.",
             same_text),
        Part("kind", "jump", "did the points before it agree within float32 rounding?", same_text),
    ], dict(layer=layer, module=module, kind=kind))


EXERCISES: dict[str, list[Callable[..., None]]] = {
    "00_tour": [check_00],
    "01_safetensors": [check_01],
    "02_gguf": [check_02],
    "03_pickle_danger": [check_03_sneaky, check_03_chained],
    "04_sharding": [check_04],
    "05_quantization_lab": [check_05],
    "06_broken_checkpoint_clinic": [check_06],
    "07_hub_quantization": [check_07],
    "08_debugging_a_conversion": [check_08],
    "09_model_families": [check_09],
    "10_real_sizes": [check_10],
    "11_safe_to_chat": [check_11],
    "12_one_model_every_format": [check_12],
    "13_an_export_that_loses_accuracy": [check_13],
}
