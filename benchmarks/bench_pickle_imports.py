"""Opening a pickle that names millions of distinct callables stays bounded.

Builds a ~31 MB pickle with 2.5 million distinct imports (each optionally called with
REDUCE), a dangerous `os.system` call at the very end, and measures `mx.open` in a fresh
process: wall time, CPU time, peak RSS, the verdict and whether os.system is reported.
Target (issue 18): < 10 s and < 1 GB for any file under 100 MB.

    python benchmarks/bench_pickle_imports.py [--count 2500000] [--uncalled]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

MEASURE = """
import resource, sys, time
sys.path.insert(0, {root!r})
import model_explorer as mx
t0, c0 = time.perf_counter(), time.process_time()
ckpt = mx.open({path!r})
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
info = ckpt.details["files"][{path!r}]["pickle"]
codes = {{f.code for f in ckpt.findings}}
system = any("os.system" in f.message for f in ckpt.findings)
print(dt, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(ckpt.findings),
      info["verdict"], system, "pickle_imports_capped" in codes, "pickle_too_long" in codes)
"""


def many_imports(count: int, called: bool, marker: str) -> bytes:
    """Protocol 2: a list of `count` distinct imports (m.f<hex>), each called with no
    arguments when `called`, then `os.system('touch marker')` appended last."""
    call = b")R" if called else b""
    # MARK ... APPENDS in batches of 1,000: one opcode per import (plus the call's two). Past
    # 5 million opcodes the walk stops (pickle_too_long, a warning): 2.5M called imports are
    # 7.5M opcodes, so there os.system is not reached, and the verdict rests on the calls.
    body = b"".join(b"(" + b"".join(b"cm\nf%x\n" % i + call for i in range(j, min(j + 1000, count)))
                    + b"e" for j in range(0, count, 1000))
    evil = b"cos\nsystem\nX" + len(f"touch {marker}").to_bytes(4, "little") + \
        f"touch {marker}".encode() + b"\x85Ra"
    return b"\x80\x02]" + body + evil + b"."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=2_500_000)
    p.add_argument("--uncalled", action="store_true", help="imports only, no REDUCE")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mx-imports-") as d:
        marker = os.path.join(d, "marker")
        path = os.path.join(d, "imports.pkl")
        with open(path, "wb") as f:
            f.write(many_imports(args.count, not args.uncalled, marker))
        size = os.path.getsize(path) / 1e6
        code = MEASURE.format(root=os.path.join(HERE, ".."), path=path)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split()
        secs, cpu, peak = float(out[0]), float(out[1]), int(out[2])
        print(f"pickle of {size:.1f} MB, {args.count:,} distinct imports "
              f"({'referenced' if args.uncalled else 'each called'}), os.system last: "
              f"{secs:.1f} s ({cpu:.1f} s CPU), peak RSS {peak / 2**30:.2f} GiB, "
              f"{out[3]} findings, verdict {out[4]}, os.system reported: {out[5]}, "
              f"capped finding: {out[6]}, walk stopped at the opcode cap: {out[7]}, "
              f"marker created: {os.path.exists(marker)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
