"""`model-explorer compare-runs A B [--prompt TEXT | --text FILE | --ids 1,2,3] [--engine E |
--a-engine E --b-engine E] [--json]` and `model-explorer trace SOURCE [--engine E] [--ids ...] [--json]`.

The engines are runs/engines.py's: decoder, transformers, onnxruntime, litert, llama.cpp; by
default each path picks its own by format (`compare-runs bert/ bert.onnx` runs transformers
against onnxruntime; `--b-engine onnxruntime` says so).

Prints the summary (KLD, top-1 agreement, perplexity with --text, the verdict: no divergence, a
drift and where it starts, or the first divergence with its weight's bytes; the configuration
differences, one per line) and relative L2 per layer x module; --json prints RunDiff.to_json().
Exit 0 when the runs agree (logits within float32 noise), 1 when they drift or part (or a
tokenizer splits the text differently), 2 when a checkpoint cannot be read or run.
"""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_DIVERGED, EXIT_UNREADABLE = 0, 1, 2


def grid_text(diff) -> list[str]:
    """Relative L2 per layer (rows) and module (columns), 2 significant digits."""
    from .model.decoder_points import LAYER_MODULES

    width = 10
    heads = [m.replace("residual", "res")[:width - 1] for m in LAYER_MODULES]
    lines = ["relative L2 ||b - a|| / ||a||", "layer " + "".join(f"{m:>{width}}" for m in heads)]
    first = diff.first_divergence
    for i, row in enumerate(diff.matrix("rel_l2")):
        cells = "".join(f"{v:>{width}.2g}" for v in row)
        mark = ""
        if first and first["layer"] == i:
            mark = f"  <- {first['module']}" + (" (the drift starts here)" if first["kind"] == "drift" else "")
        lines.append(f"{i:>5} {cells}{mark}")
    outer = [r for r in diff.rows if r["layer"] is None]
    lines.append("      " + ", ".join(f"{r['module']} {r['rel_l2']:.2g}" for r in outer))
    return lines


def run_compare_runs(args) -> int:
    """args: a, b, prompt, text (a file name), json, device, engine, a_engine, b_engine."""
    from .model.config import UnsupportedModel
    from .runs.compare_runs import compare_runs

    text = None
    if args.text is not None:
        try:
            with open(args.text, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            print(f"model-explorer: cannot read the text file {args.text!r}: {e}", file=sys.stderr)
            return EXIT_UNREADABLE
    try:
        ids = parse_ids(getattr(args, "ids", None))
        both = getattr(args, "engine", None)
        diff = compare_runs(args.a, args.b, prompt=args.prompt, ids=ids, text=text, device=args.device,
                            a_engine=getattr(args, "a_engine", None) or both,
                            b_engine=getattr(args, "b_engine", None) or both)
    except (OSError, UnsupportedModel, ValueError, RuntimeError, MemoryError) as e:
        print(f"model-explorer: cannot compare the runs: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps(diff.to_json(), allow_nan=False))
    else:
        words = diff.engine_labels
        print(f"a: {diff.a} ({words.get('a') or diff.engine_a})\nb: {diff.b} ({words.get('b') or diff.engine_b})")
        print(diff.summary())
        print()
        print("\n".join(grid_text(diff)))
    return EXIT_DIVERGED if diff.first_divergence or diff.tokenizer_mismatch else EXIT_OK


def parse_ids(text: str | None) -> list[int] | None:
    """"1,2,3" -> [1, 2, 3]; a word that is not an integer is a ValueError said to the user."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise ValueError(f"--ids takes comma-separated integers, not {text!r}") from None


def run_trace(args) -> int:
    """args: source, prompt, ids, engine, json. Exit 1 when NaN/Inf appear."""
    from .model.config import UnsupportedModel
    from .runs.trace import trace

    try:
        t = trace(args.source, prompt=args.prompt, ids=parse_ids(args.ids), engine=args.engine)
    except (OSError, UnsupportedModel, ValueError, RuntimeError, MemoryError) as e:
        print(f"model-explorer: cannot trace the run: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps(t.to_json(), allow_nan=False))
    else:
        print(f"{t.source} ({t.engine_label or t.engine}): {t!r}")
        print(t.table()[["layer", "module", "norm", "absmax", "nan", "inf", "massive", "tensor"]].to_string(index=False))
    return EXIT_DIVERGED if t.first_nonfinite else EXIT_OK
