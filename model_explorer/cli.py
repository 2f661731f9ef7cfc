"""The `model-explorer` command: info, hexdump, doctor, diff, generate, compare-runs; audit and scan
(cli_batch), repair (cli_repair)."""

from __future__ import annotations

import argparse
import json
import sys

from .cli_batch import add_batch_parsers
from .cli_info import (
    EXIT_ERRORS,
    EXIT_OK,
    EXIT_UNREADABLE,
    OPTION_HELP,
    banner,
    metadata_json,
    plural,
    tensor_start,
    value_text,
)
from .cli_repair import add_repair_parser
from .safe_text import SafeStream, escape
from .units import format_bytes


class _Parser(argparse.ArgumentParser):
    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if not action.help and action.dest in OPTION_HELP:  # every option says what it does
            action.help = OPTION_HELP[action.dest]
        return action

    def error(self, message: str):  # usage errors exit 2, like an unreadable source
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_UNREADABLE)


def _open(source: str, deep: bool = False, cross_check: bool = False):
    import model_explorer as mx

    try:
        return mx.open(source, deep=deep, cross_check=cross_check)
    except (OSError, ValueError) as e:
        print(f"model-explorer: cannot read {source!r}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_UNREADABLE) from None


def _size(n: int) -> str:
    return format_bytes(n)


def _card(ckpt):
    from .model.card import card

    try:
        return card(ckpt)
    except Exception as e:  # noqa: BLE001 - the card is a summary: the listing below still prints
        print(f"model card unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def cmd_info(args) -> int:
    ckpt = _open(args.source, cross_check=True)  # its exit code is doctor's
    model_card = _card(ckpt)
    if args.json:
        out = ckpt.summary()
        out["card"] = model_card.to_dict() if model_card is not None else None
        out["tensors"] = [t.to_dict() for t in ckpt.tensors.values()]
        out["metadata_keys"] = [k for k in ckpt.metadata]
        out["metadata"] = metadata_json(ckpt.metadata, args.full_arrays)
        out["missing_tensors"] = [m.to_dict() for m in ckpt.index_mismatches if m.kind == "missing"]
        out["findings"] = [f.to_dict() for f in ckpt.findings]
        print(json.dumps(out, indent=1, default=str))
        return doctor_exit(ckpt)
    for line in banner(ckpt):
        print(line)
    if model_card is not None and (model_card.architecture or model_card.adapter or model_card.library):
        print(model_card.text())  # a loose tensor file has no model to describe
        print()
    s = ckpt.summary()
    print(f"{s['format']}: {plural(len(s['files']), 'file')}, {_size(s['total_size'])}, "
          f"{plural(s['tensor_count'], 'tensor')}, {plural(s['parameter_count'], 'parameter')}")
    if "indexed_tensors" in s and s["readable_indexed_tensors"] < s["indexed_tensors"]:
        print(f"{s['readable_indexed_tensors']:,} of {s['indexed_tensors']:,} indexed tensors readable")
    print("dtypes: " + ", ".join(f"{k} x{v}" for k, v in s["dtypes"].items()))
    if s.get("quantization"):
        _print_quantization(s["quantization"])
    if ckpt.metadata:
        print(f"metadata: {plural(len(ckpt.metadata), 'key')}")
        for key, value in list(ckpt.metadata.items())[:args.max_keys]:
            print(f"  {key}: {value_text(value)}")
    print(f"{'name':<48} {'dtype':<8} {'shape':<20} {'offset':>12} {'bytes':>12}")
    for t in list(ckpt.tensors.values())[:args.max_tensors]:
        print(f"{escape(t.name):<48} {t.label:<8} {str(list(t.shape)):<20} {t.offset:>12} {t.length:>12}")
    if len(ckpt.tensors) > args.max_tensors:
        print(f"... {len(ckpt.tensors) - args.max_tensors} more (--max-tensors)")
    c = s["findings"]
    print(f"findings: {plural(c['error'], 'error')}, {plural(c['warning'], 'warning')}, {c['info']} info "
          "(model-explorer doctor for details)")
    return doctor_exit(ckpt)


def _print_quantization(q: dict) -> None:
    """Two lines: the scheme and its parameters, then the real mix with bits per weight."""
    parts = [f"{q.get('label') or q.get('scheme')} ({q.get('scheme')})"]
    if q.get("bits"):
        parts.append(f"{q['bits']} bits")
    if q.get("block_size"):
        bs = q["block_size"]
        parts.append(f"blocks of {'x'.join(map(str, bs)) if isinstance(bs, list) else bs}")
    elif q.get("group_size"):
        parts.append(f"group {q['group_size']}")
    elif q.get("codec") and q.get("scheme") != "gguf":
        parts.append("per channel")
    if q.get("sym") is not None:
        parts.append("symmetric" if q["sym"] else "asymmetric")
    if q.get("act_order"):
        parts.append("act-order")
    if q.get("inferred"):
        parts.append("inferred from tensor names")
    if q.get("decoded") is False:
        parts.append("NOT decoded: values shown packed")
    print("quantization: " + ", ".join(parts))
    mods = q.get("unquantized_modules") or []
    if mods:
        more = f" (+{len(mods) - 4} more)" if len(mods) > 4 else ""
        print(f"  unquantized: {', '.join(mods[:4])}{more}")
    if q.get("text"):
        print(f"  {q['text']}")


def cmd_hexdump(args) -> int:
    from .hexview import SpanIndex, hexdump_lines

    ckpt = _open(args.source)
    file = args.file or ckpt.files[0]
    if args.tensor:
        try:
            file, start, size = tensor_start(ckpt, args.tensor)
        except KeyError as e:
            print(f"model-explorer: {e.args[0]}", file=sys.stderr)
            return EXIT_UNREADABLE
        args.offset += start
        print(f"{args.tensor}: {plural(size, 'byte')} at {start} (0x{start:x}) in {file}")
    data = ckpt.read_bytes(args.offset, args.length, file)
    for line in hexdump_lines(data, args.offset, SpanIndex(ckpt.spans_for(file))):
        print(line)
    return EXIT_OK


def cmd_doctor(args) -> int:
    ckpt = _open(args.source, deep=args.deep, cross_check=True)
    ckpt.build_all()  # spans and records left for later: what building them meets is reported
    if args.json:
        print(json.dumps({
            "source": args.source,
            "format": ckpt.format,
            "tensor_count": len(ckpt.tensors),
            "findings": [f.to_dict() for f in ckpt.findings],
            "verdicts": {file: d["pickle"]["verdict"] for file, d in
                         ckpt.details.get("files", {}).items() if "pickle" in d},
        }, indent=1))
    else:
        print(f"{args.source}: {ckpt.format}, {len(ckpt.tensors)} tensors")
        if not ckpt.findings:
            print("no findings: the file reads cleanly")
        for f in ckpt.findings:
            print(f)
            if f.fix:
                print(f"    fix: {f.fix}")
        for file, details in ckpt.details.get("files", {}).items():
            if "pickle" in details:
                print(f"pickle verdict: {details['pickle']['verdict']} ({file})")
    return doctor_exit(ckpt, args.strict)


def doctor_exit(ckpt, strict: bool = False) -> int:
    """0 clean; 1 errors (a dangerous pickle is one), or warnings with --strict; 2 when a
    reader failed on a file (internal_error) and nothing else is wrong: a crash is not a
    verdict on the file."""
    errors = [f for f in ckpt.errors if f.code != "internal_error"]
    if errors:
        return EXIT_ERRORS
    if len(errors) != len(ckpt.errors):
        return EXIT_UNREADABLE
    if strict and ckpt.warnings:
        return EXIT_ERRORS
    return EXIT_OK


def cmd_diff(args) -> int:
    import model_explorer as mx

    try:
        table = mx.diff(args.a, args.b)
    except (OSError, ValueError) as e:
        print(f"model-explorer: cannot diff: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(diff_text(table))
    return EXIT_OK


def diff_text(table) -> str:
    """The diff table for people: shapes as [4096, 4096], numbers to 4 significant digits, and an
    empty cell where a side has no tensor or a figure was not computed (never None or NaN)."""
    import pandas as pd

    def cell(v) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(map(str, v)) + "]"
        if v is None or (isinstance(v, float) and v != v):
            return ""
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    shown = pd.DataFrame({col: [cell(v) for v in table[col]] for col in table.columns})
    with pd.option_context("display.max_rows", None, "display.width", 200):
        return shown.to_string(index=False)


def cmd_graph(args) -> int:
    """The graph the file records: the grouped outline, or every operator with --nodes."""
    import model_explorer as mx

    from .model.graph_facts import describe_graph, describe_text

    ckpt = _open(args.source)
    g = mx.graph(ckpt)
    described = describe_text(describe_graph(ckpt))
    if described:  # what the graph file says of its model, above its outline
        print(described)
    print(g.outline(args.depth))
    if args.nodes:
        cols = ["id", "op", "group", "parameters", "offset", "length"]
        print(g.nodes[cols].to_string(index=False, max_rows=args.nodes))
    return EXIT_OK


def cmd_generate(args) -> int:
    from .cli_generate import run_generate

    return run_generate(args)


def cmd_trace(args) -> int:
    from .cli_runs import run_trace

    return run_trace(args)


def cmd_compare_runs(args) -> int:
    from .cli_runs import run_compare_runs

    return run_compare_runs(args)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="model-explorer", description="See inside ML checkpoints without running them.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("info", help="list tensors and metadata")
    s.add_argument("source")
    s.add_argument("--json", action="store_true")
    s.add_argument("--max-tensors", type=int, default=50)
    s.add_argument("--max-keys", type=int, default=40)
    s.add_argument("--full-arrays", action="store_true")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("hexdump", help="bytes with the labels of the fields they hold")
    s.add_argument("source")
    s.add_argument("--offset", type=lambda x: int(x, 0), default=0)
    s.add_argument("--length", type=lambda x: int(x, 0), default=256)
    s.add_argument("--file", help="which file of a multi-file checkpoint (default: the first)")
    s.add_argument("--tensor", metavar="NAME")
    s.set_defaults(func=cmd_hexdump)

    s = sub.add_parser("doctor", help="diagnose problems; exit 0 clean, 1 errors (a dangerous "
                       "pickle is one), 2 unreadable or a reader failed")
    s.add_argument("source")
    s.add_argument("--json", action="store_true")
    s.add_argument("--strict", action="store_true",
                   help="also exit 1 when there are warnings (e.g. a suspicious pickle, or a "
                        "whole model that needs its author's classes)")
    s.add_argument("--deep", action="store_true", help="also decode tensors and check values")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("diff", help="compare two checkpoints tensor by tensor")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("graph", help="the model's graph: a graph file's operators (ONNX, OpenVINO, TFLite, Keras, "
                       "TorchScript) with its inputs, outputs and operator kinds, or the family's block graph")
    s.add_argument("source")
    s.add_argument("--depth", type=int, default=2, help="group levels shown (default 2)")
    s.add_argument("--nodes", type=int, default=0, metavar="N", help="also list the first N operators")
    s.set_defaults(func=cmd_graph)

    s = sub.add_parser("generate", help="run the dequantize-and-generate demo")
    s.add_argument("source", nargs="?", default=None, help="default: the bundled SmolLM2 sample")
    s.add_argument("--prompt", default="What is the capital of France?")
    s.add_argument("--max-new-tokens", type=int, default=32)
    s.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    s.add_argument("--chat", action="store_true")
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("compare-runs", help="run two checkpoints on the same tokens and show where they "
                       "part ways; exit 0 alike, 1 diverged, 2 unreadable")
    s.add_argument("a")
    s.add_argument("b")
    given = s.add_mutually_exclusive_group()
    given.add_argument("--prompt", default=None, help="the text both run on (default: a plain sentence)")
    given.add_argument("--text", metavar="FILE", help="a text file both run on; adds each side's perplexity")
    s.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"],
                   help="cpu runs the numpy reference, cuda or mps run torch (default: cpu)")
    s.add_argument("--ids", default=None, help="token ids both run on, comma-separated (instead of a prompt)")
    s.add_argument("--engine", default=None, help="what runs both sides (default: each by format); "
                   "--a-engine / --b-engine choose per side")
    s.add_argument("--a-engine", default=None,
                   help="what runs a: decoder, transformers, onnxruntime, litert, llama.cpp (default: by format)")
    s.add_argument("--b-engine", default=None,
                   help="what runs b (default: by format: an .onnx file runs on onnxruntime)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_compare_runs)

    s = sub.add_parser("trace", help="one forward pass with statistics of every named activation; "
                       "exit 0, 1 when NaN/Inf appear, 2 unreadable")
    s.add_argument("source")
    s.add_argument("--prompt", default=None, help="the text it runs on (default: a plain sentence)")
    s.add_argument("--ids", default=None, help="token ids, comma-separated (instead of a prompt)")
    s.add_argument("--engine", default=None,
                   help="what runs it: decoder, transformers, onnxruntime, litert, llama.cpp (default: by format)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_trace)
    add_batch_parsers(sub)
    add_repair_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plain = sys.stdout
    sys.stdout = SafeStream(plain)  # a name a file gave can hold what no terminal should print
    try:
        return args.func(args)
    except SystemExit as e:  # an unreadable source exits 2 from deep inside a command
        return int(e.code or 0)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - a crash is not "errors found": never exit 1
        print(escape(f"model-explorer: internal error: {type(e).__name__}: {e}"), file=sys.stderr)
        return EXIT_UNREADABLE
    finally:
        sys.stdout = plain


if __name__ == "__main__":
    raise SystemExit(main())
