"""The `model-explorer` command: info, hexdump, doctor, diff, generate."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_ERRORS, EXIT_UNREADABLE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2, like an unreadable source
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_UNREADABLE)


def _open(source: str, deep: bool = False):
    import model_explorer as mx

    try:
        return mx.open(source, deep=deep)
    except (OSError, ValueError) as e:
        print(f"model-explorer: cannot read {source!r}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_UNREADABLE) from None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _card(ckpt):
    from .model.card import card

    try:
        return card(ckpt)
    except Exception as e:  # noqa: BLE001 - the card is a summary: the listing below still prints
        print(f"model card unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def cmd_info(args) -> int:
    ckpt = _open(args.source)
    model_card = _card(ckpt)
    if args.json:
        out = ckpt.summary()
        out["card"] = model_card.to_dict() if model_card is not None else None
        out["tensors"] = [t.to_dict() for t in ckpt.tensors.values()]
        out["metadata_keys"] = [k for k in ckpt.metadata]
        out["findings"] = [f.to_dict() for f in ckpt.findings]
        print(json.dumps(out, indent=1, default=str))
        return EXIT_OK
    if model_card is not None and (model_card.architecture or model_card.adapter):
        print(model_card.text())  # a loose tensor file has no model to describe
        print()
    s = ckpt.summary()
    print(f"{s['format']}: {len(s['files'])} file(s), {_size(s['total_size'])}, "
          f"{s['tensor_count']} tensors, {s['parameter_count']:,} parameters")
    print("dtypes: " + ", ".join(f"{k} x{v}" for k, v in s["dtypes"].items()))
    if ckpt.metadata:
        print(f"metadata: {len(ckpt.metadata)} keys")
        for key, value in list(ckpt.metadata.items())[:args.max_keys]:
            text = repr(getattr(value, "value", value))
            print(f"  {key}: {text[:100]}")
    print(f"{'name':<48} {'dtype':<8} {'shape':<20} {'offset':>12} {'bytes':>12}")
    for t in list(ckpt.tensors.values())[:args.max_tensors]:
        print(f"{t.name:<48} {t.kind:<8} {str(list(t.shape)):<20} {t.offset:>12} {t.length:>12}")
    if len(ckpt.tensors) > args.max_tensors:
        print(f"... {len(ckpt.tensors) - args.max_tensors} more (--max-tensors)")
    c = s["findings"]
    print(f"findings: {c['error']} errors, {c['warning']} warnings, {c['info']} info "
          "(model-explorer doctor for details)")
    return EXIT_OK


def cmd_hexdump(args) -> int:
    from .hexview import SpanIndex, hexdump_lines

    ckpt = _open(args.source)
    file = args.file or ckpt.files[0]
    data = ckpt.read_bytes(args.offset, args.length, file)
    for line in hexdump_lines(data, args.offset, SpanIndex(ckpt.spans_for(file))):
        print(line)
    return EXIT_OK


def cmd_doctor(args) -> int:
    ckpt = _open(args.source, deep=args.deep)
    if args.json:
        print(json.dumps({
            "source": args.source,
            "format": ckpt.format,
            "tensor_count": len(ckpt.tensors),
            "findings": [f.to_dict() for f in ckpt.findings],
        }, indent=1))
    else:
        print(f"{args.source}: {ckpt.format}, {len(ckpt.tensors)} tensors")
        if not ckpt.findings:
            print("no findings: the file reads cleanly")
        for f in ckpt.findings:
            print(f)
            if f.fix:
                print(f"    fix: {f.fix}")
    return EXIT_ERRORS if ckpt.errors else EXIT_OK


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
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(table.to_string())
    return EXIT_OK


def cmd_generate(args) -> int:
    from .demo.cli import run_generate

    return run_generate(args)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="model-explorer", description="See inside ML checkpoints without running them.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("info", help="list tensors and metadata")
    s.add_argument("source")
    s.add_argument("--json", action="store_true")
    s.add_argument("--max-tensors", type=int, default=50)
    s.add_argument("--max-keys", type=int, default=40)
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("hexdump", help="bytes with the labels of the fields they hold")
    s.add_argument("source")
    s.add_argument("--offset", type=lambda x: int(x, 0), default=0)
    s.add_argument("--length", type=lambda x: int(x, 0), default=256)
    s.add_argument("--file", help="which file of a multi-file checkpoint (default: the first)")
    s.set_defaults(func=cmd_hexdump)

    s = sub.add_parser("doctor", help="diagnose problems; exit 1 when there are errors")
    s.add_argument("source")
    s.add_argument("--json", action="store_true")
    s.add_argument("--deep", action="store_true", help="also decode tensors and check values")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("diff", help="compare two checkpoints tensor by tensor")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("generate", help="run the dequantize-and-generate demo")
    s.add_argument("source", nargs="?", default=None, help="default: the bundled SmolLM2 sample")
    s.add_argument("--prompt", default="What is the capital of France?")
    s.add_argument("--max-new-tokens", type=int, default=32)
    s.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    s.add_argument("--chat", action="store_true")
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SystemExit as e:  # an unreadable source exits 2 from deep inside a command
        return int(e.code or 0)
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
