"""An audit under load (issue 45): the test suite's corpora (hostile pickles, pickles under other
names, files other libraries write, the hostile values of issue 45, the real checkpoints `make
dev` installs) copied many times into one tree, hostile and real mixed, audited on 2 local Dask
worker processes.

Prints files per second, each worker's peak memory, bytes read against bytes on disk, and
checks that every input file is a row (a model's source or one of the files it read) or a
listed skip, and that no hostile pickle ran.

    .venv/bin/python benchmarks/bench_audit_load.py [--copies 40] [--workers 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # the tests' builders make the corpus

import model_explorer as mx  # noqa: E402


def build_corpus(folder: str, marker: str) -> None:
    from audit.corpus import hostile, peer, real
    from audit.test_hostile_rows import hostile_files

    base = Path(folder)
    hostile(base / "hostile", Path(marker))
    peer(base / "peer")
    hostile_files(base / "values")
    real(base / "real")


def copy_tree(corpus: str, tree: str, copies: int) -> tuple[int, int]:
    """`copies` copies of the corpus side by side; (files, bytes) as the audit sees them."""
    for i in range(copies):
        shutil.copytree(corpus, os.path.join(tree, f"copy{i:04d}"), symlinks=True,
                        copy_function=os.link)  # hard links: the same bytes, no copies on disk
    files = size = 0
    for dirpath, _, names in os.walk(tree):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(dirpath, n))
    return files, size


def accounted(tree: str, result) -> tuple[set, set]:
    """(files on disk, files that are a row's source, a file a row read, or a listed skip)."""
    on_disk = {os.path.abspath(os.path.join(d, n)) for d, _, names in os.walk(tree) for n in names}
    seen = set()
    for r in result.models.to_dict("records"):  # a folder model: the files it read are its paths
        seen.add(os.path.abspath(r["source"]))
        seen.update(os.path.abspath(p) for p in r["paths"])
    seen.update(os.path.abspath(p) for p in result.skipped["path"])
    return on_disk, seen


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="two copies, to check the script runs")
    args = ap.parse_args()
    copies = 2 if args.quick else args.copies
    from dask.distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory(prefix="mx-audit-load-") as tmp:
        marker = os.path.join(tmp, "PWNED")
        corpus, tree = os.path.join(tmp, "corpus"), os.path.join(tmp, "tree")
        build_corpus(corpus, marker)
        files, size = copy_tree(corpus, tree, copies)
        print(f"tree: {copies} copies of the corpus, {files:,} files, {size / 2**20:,.1f} MiB on disk")
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=50)
        client = Client(cluster)
        try:
            client.run(lambda: None)  # workers up before the clock starts
            t0 = time.perf_counter()
            result = mx.audit(tree, client=client, progress=False)
            seconds = time.perf_counter() - t0
            peaks = client.run(peak_rss_mb)
        finally:
            client.close()
            cluster.close()
        on_disk, seen = accounted(tree, result)
        missing = sorted(on_disk - seen)
        read = int(result.models["bytes_read"].sum())
        statuses = result.models["status"].value_counts().to_dict()
        print(f"audit on {args.workers} workers: {len(result.models):,} rows, {len(result.skipped):,} "
              f"skips in {seconds:.1f} s = {files / seconds:,.0f} files/s ({statuses})")
        print("peak memory per worker: " + ", ".join(f"{v:,.0f} MB" for v in peaks.values()))
        print(f"bytes read {read / 2**20:,.1f} MiB against {size / 2**20:,.1f} MiB on disk "
              f"({read / max(1, size):.2f}x)")
        print(f"summary: {result.summary}")
        print(f"exit code {result.exit_code}; files neither a row nor a skip: {len(missing)}"
              + (f" (first: {missing[:3]})" if missing else ""))
        print(f"marker file created: {'YES' if os.path.exists(marker) else 'no'}")
        return 1 if os.path.exists(marker) or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
