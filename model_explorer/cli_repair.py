"""`model-explorer repair`: write a repaired copy, never touching the source."""

from __future__ import annotations

import json
import sys

from .cli_info import EXIT_ERRORS, EXIT_OK, EXIT_UNREADABLE


def _gguf_value(text: str):
    """KEY=VALUE's value: JSON when it parses (numbers, true, lists), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def cmd_repair(args) -> int:
    """Write a repaired copy; exit 0 when every selected fix applied and the output reopens
    without the fixed findings, 1 when some remain, 2 when the repair was refused."""
    import model_explorer as mx

    from .repairs import RepairError

    choices = {"tie": args.tie, "deep": args.deep}
    if args.strip_prefix:
        choices["strip_prefix"] = args.strip_prefix
    if args.gguf_set:
        pairs = [kv.split("=", 1) for kv in args.gguf_set]
        if any(len(p) != 2 for p in pairs):
            print("model-explorer: --gguf-set takes KEY=VALUE", file=sys.stderr)
            return EXIT_UNREADABLE
        choices["gguf_set"] = {k: _gguf_value(v) for k, v in pairs}
    if args.gguf_remove:
        choices["gguf_remove"] = args.gguf_remove
    bar = None
    progress = None
    if not args.json and not args.dry_run and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=0, unit="B", unit_scale=True, desc="repair", file=sys.stderr)

        def progress(done, total, what):
            bar.total = total
            bar.n = done
            bar.refresh()
    try:
        report = mx.repair(args.source, args.dest, fixes=args.only, overwrite=args.overwrite,
                           progress=progress, dry_run=args.dry_run, **choices)
    except (RepairError, OSError) as e:
        print(f"model-explorer: repair refused: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(report.to_json(indent=1))
    elif args.dry_run:
        plan = mx.repair_plan(args.source, **choices)
        print(plan)
        for s in report.skipped:
            print(f"  skipped  {s}")
    else:
        print(report)
    if args.dry_run:
        return EXIT_OK
    return EXIT_OK if report.ok else EXIT_ERRORS


def add_repair_parser(sub) -> None:
    s = sub.add_parser("repair", help="write a repaired copy (the source is never touched); exit 0 "
                       "when every fix applied and the copy reopens without them")
    s.add_argument("source")
    s.add_argument("dest", help="a new folder, or a .safetensors/.gguf path for a one-file source")
    s.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    s.add_argument("--only", nargs="+", metavar="CODE", help="only these fixes (fix names or finding codes)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--overwrite", action="store_true", help="write into a non-empty destination")
    s.add_argument("--tie", choices=["config", "copy"], default="config",
                   help="lm_head missing: set tie_word_embeddings (default) or write a copy")
    s.add_argument("--strip-prefix", help="strip this prefix from every tensor name")
    s.add_argument("--gguf-set", nargs="+", metavar="KEY=VALUE", help="GGUF metadata to set")
    s.add_argument("--gguf-remove", nargs="+", metavar="KEY", help="GGUF metadata to remove")
    s.add_argument("--deep", action="store_true", help="decode tensors first (lists NaN/Inf as unfixable)")
    s.set_defaults(func=cmd_repair)
