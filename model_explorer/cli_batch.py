"""`model-explorer audit` and `scan`: many models, or every tensor of one, on Dask."""

from __future__ import annotations

import sys

from .cli_info import EXIT_ERRORS, EXIT_OK, EXIT_UNREADABLE


def cmd_audit(args) -> int:
    """Audit many models on Dask; exit 0 clean, 1 some error findings, 2 some unreadable."""
    import model_explorer as mx

    try:
        result = mx.audit(args.sources, out=args.out, sarif=args.sarif, html=args.html, deep=args.deep,
                          scheduler=args.scheduler, workers=args.workers, threads=args.threads,
                          timeout=args.timeout or None, memory_limit=args.memory_limit,
                          max_file_bytes=args.max_file_size)
    except ImportError as e:
        print(f"model-explorer: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    m = result.models
    if args.json:
        print(m.to_json(orient="records"))
    else:
        bad = m[(m["status"] != "ok") | (m["errors"] > 0)]
        for r in bad.head(args.max_rows).to_dict("records"):
            what = f"{r['status']}: {r['error']}" if r["status"] != "ok" else \
                f"{r['errors']} errors ({', '.join(r['top_codes'])})"
            print(f"{r['source']}: {what}")
        _print_skipped(result.skipped, args.max_rows)
        print(result.summary)
    return result.exit_code


def _print_skipped(skipped, most: int) -> None:
    """The files not audited as models, those that matter most first (side files are not listed:
    the parquet, SARIF and HTML outputs hold them)."""
    from .audits.inventory import NOT_SKIPPED

    rows = [r for r in skipped.to_dict("records") if r["reason"] not in NOT_SKIPPED]
    order = ["unreadable", "format_not_read", "link_outside", "too_large", "not_model", "not_searched"]
    rows.sort(key=lambda r: (order.index(r["reason"]) if r["reason"] in order else len(order), r["path"]))
    for r in rows[:most]:
        print(f"{r['path']}: not audited: {r['detail']}")
    if len(rows) > most:
        print(f"... {len(rows) - most} more files not audited (--max-rows, or --out for the whole table)")


def cmd_scan(args) -> int:
    """Exact statistics of every tensor (on Dask with --workers/--scheduler) and the layer profile."""
    import model_explorer as mx

    try:
        table = mx.scan(args.source, scheduler=args.scheduler, workers=args.workers, threads=args.threads)
    except (OSError, ValueError) as e:
        print(f"model-explorer: cannot scan {args.source!r}: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.out:
        table.to_parquet(args.out) if args.out.endswith(".parquet") else table.to_csv(args.out, index=False)
    found = mx.layer_findings(table, stat=args.stat)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        ax = mx.plot_layers(table, stat=args.stat)
        ax.figure.savefig(args.plot, bbox_inches="tight", dpi=120)
    bad = table[(table["nan"].fillna(0) > 0) | (table["inf"].fillna(0) > 0) | table["error"].notna()]
    cols = ["name", "dtype", "shape", "min", "max", "mean", "std", "norm", "nan", "inf"]
    import pandas as pd

    with pd.option_context("display.max_rows", args.max_rows, "display.width", 200):
        print(table[cols].to_string(max_rows=args.max_rows))
    for f in found:
        print(f)
    print(f"{len(table)} tensors, {len(bad)} with NaN/Inf or undecodable, {len(found)} layer findings")
    return EXIT_ERRORS if len(bad) else EXIT_OK


def add_batch_parsers(sub) -> None:
    s = sub.add_parser("audit", help="audit many models on Dask: parquet, SARIF, HTML; exit 1/2 on errors")
    s.add_argument("sources", nargs="+", help="files, folders, globs, URLs, or a .txt file of sources")
    s.add_argument("--out", help="results.parquet (findings go to results.findings.parquet); reruns resume")
    s.add_argument("--sarif", help="write SARIF 2.1.0 here")
    s.add_argument("--html", help="write an offline dashboard here (reports in NAME_reports/)")
    s.add_argument("--deep", action="store_true", help="also decode tensors (split per tensor range)")
    s.add_argument("--scheduler", help="tcp://host:8786 of an existing Dask cluster")
    s.add_argument("--workers", type=int, help="local worker processes (default: the cores; 0: no Dask, audit in this process)")
    s.add_argument("--threads", type=int, default=1, help="tasks at a time per worker (I/O-bound remote audits)")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds per model (0: none)")
    s.add_argument("--memory-limit", default="4GiB", help="memory cap per model")
    s.add_argument("--max-file-size", help="do not read files larger than this (e.g. 20GB); they "
                   "are listed as not audited")
    s.add_argument("--json", action="store_true", help="print the models table as JSON")
    s.add_argument("--max-rows", type=int, default=50,
                   help="list at most this many of the worst models and of the files not audited (default: 50)")
    s.set_defaults(func=cmd_audit)

    s = sub.add_parser("scan", help="exact statistics of every tensor, and the layer profile")
    s.add_argument("source")
    s.add_argument("--scheduler", help="tcp://host:8786 of an existing Dask cluster")
    s.add_argument("--workers", type=int, help="local Dask worker processes (default: no Dask)")
    s.add_argument("--threads", type=int, default=1, help="range reads in flight per worker (remote storage)")
    s.add_argument("--out", help="the table as .parquet or .csv")
    s.add_argument("--plot", help="save the layer heatmap (PNG/SVG)")
    s.add_argument("--stat", default="norm", choices=["norm", "std", "absmax", "mean"],
                   help="the statistic the layer profile compares (default: norm)")
    s.add_argument("--max-rows", type=int, default=40,
                   help="print at most this many tensor rows (default: 40)")
    s.set_defaults(func=cmd_scan)
