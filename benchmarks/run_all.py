"""Run every benchmarks/bench_*.py in turn and print their figures."""

import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).parent
status = 0
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name} ===", flush=True)
    status |= subprocess.call([sys.executable, str(script)])
sys.exit(status)
