"""model_explorer's pickle verdicts beside picklescan, modelscan and fickling.

Builds a corpus with the test suite's builders (tests/pytorch): hostile files of every
class issue 18 names (gadget families, attribute traversal, frame straddles, duplicate zip
entries, numpy object arrays, torch's legacy tar, nested embedded files) and benign ones
(torch.save state dicts and whole models, plain data pickles in every protocol, numpy
files). Each file would create a marker if it ran; the script checks none appears. Then
prints, per tool: the share of dangerous files it flags, false flags on the safe files,
silent misses (a dangerous file given no finding at all) and crashes; and the cost of the
amplification shapes (a 92 MB safetensors header of 1.2 million overlapping entries, a
pickle of 500,000 distinct imports).

    .venv/bin/python benchmarks/bench_scanners.py [--skip-amplification] [--list]
    .venv/bin/python benchmarks/bench_scanners.py --peer-dir DIR [--list]

--peer-dir scores the peers' own test files instead (a checkout's picklescan/tests/data and
data2, modelscan's or fickling's generated files): every file is expected dangerous unless its
name marks it safe (PEER_SAFE), as their authors' tests do.

The three scanners are optional (`pip install picklescan modelscan fickling`); a missing
one is reported as such. None of them runs a pickle either.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import model_explorer as mx  # noqa: E402

MARKER = "marker"


# -- the corpus ------------------------------------------------------------------------------

def build_corpus(d: str) -> tuple[dict[str, str], dict[str, str]]:
    """({name: path} dangerous, {name: path} safe)."""
    import collections

    import numpy as np
    import torch

    from tests.pytorch.gadgets import frame_straddle, gadget_pickles, nested_frames
    from tests.pytorch.helpers import Reducer, hostile_pickles, touch_command
    from tests.pytorch.test_bounded import nested_legacy, two_data_pkls
    from tests.pytorch.test_containers import torch_tar

    marker = os.path.join(d, MARKER)
    bad: dict[str, bytes] = {}
    good: dict[str, bytes] = {}
    for name, data in gadget_pickles(marker).items():
        bad[f"{name}.pkl"] = data
    for name, data in hostile_pickles(marker).items():
        bad[f"basic_{name}.pkl"] = data
    bad["frame_straddle.pkl"] = frame_straddle(marker)
    bad["nested_frames.pkl"] = nested_frames(marker)

    def saved(obj, **kw) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf, **kw)
        return buf.getvalue()

    evil = Reducer(os.system, (touch_command(marker),))
    valid_zip = saved({"w": torch.ones(2)})
    bad["torch_zip_payload.pt"] = saved({"w": torch.ones(2), "x": evil})
    bad["torch_legacy_payload.pt"] = saved({"w": torch.ones(2), "x": evil},
                                           _use_new_zipfile_serialization=False)
    bad["torch_zip_straddle.pt"] = _swap_data_pkl(valid_zip, frame_straddle(marker))
    bad["torch_zip_glob_os.pt"] = _swap_data_pkl(valid_zip, gadget_pickles(marker)["glob_os_system"])
    plain = pickle.dumps({"a": 1}, protocol=2)
    hostile = hostile_pickles(marker)["os_system_p2"]
    bad["zip_duplicate_evil_last.pt"] = two_data_pkls(plain, hostile)
    bad["zip_duplicate_evil_first.pt"] = two_data_pkls(hostile, plain)
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = {"a": 1}, evil
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=True)
    bad["object_array.npy"] = buf.getvalue()
    buf = io.BytesIO()
    np.savez(buf, w=np.ones(3), evil=obj)
    bad["object_array.npz"] = buf.getvalue()
    bad["legacy_tar_payload.pt"] = torch_tar({"w": torch.ones(2)}, {"x": evil})
    bad["nested_embedded_3.pt"] = nested_legacy(3, marker)
    bad["pickled_tensor_payload.pkl"] = pickle.dumps({"t": torch.ones(2), "x": evil}, protocol=2)

    state = {"layer.weight": torch.randn(4, 4), "layer.bias": torch.zeros(4),
             "emb": torch.randn(8, 2).to(torch.bfloat16), "step": torch.tensor(3)}
    good["state_dict.pt"] = saved(state)
    good["state_dict_legacy.pt"] = saved(state, _use_new_zipfile_serialization=False)
    good["optimizer.pt"] = saved({"state": {0: {"exp_avg": torch.ones(2)}},
                                  "param_groups": [{"lr": 0.1, "params": [0]}]})
    good["whole_model.pt"] = saved(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()))
    good["with_numpy.pt"] = saved({"w": torch.ones(2), "np": np.arange(4.0),
                                   "scalar": np.float32(1.5)})
    good["legacy_tar.pt"] = torch_tar({"w": torch.ones(2), "b": torch.arange(3.0)})
    good["pickled_tensor.pkl"] = pickle.dumps({"t": torch.ones(3)}, protocol=2)
    data = {"a": [1, 2.5, "x", b"yy", None, True], "t": (1, 2), "s": {1, 2},
            "f": frozenset({3}), "c": complex(1, 2), "ba": bytearray(b"z"), "e": b"",
            "od": collections.OrderedDict(k=1), "cnt": collections.Counter("aab"),
            "arr": np.arange(6, dtype=np.float32).reshape(2, 3), "big": "v" * 70_000}
    for proto in range(6):
        good[f"data_p{proto}.pkl"] = pickle.dumps(data, protocol=proto)
    good["framed_p5.pkl"] = pickle.dumps({f"k{i}": [i, "v" * 40] for i in range(5000)},
                                         protocol=5)
    for name, arr in (("f32", np.ones((3, 4), np.float32)), ("i64", np.arange(5)),
                      ("fortran", np.asfortranarray(np.ones((2, 3))))):
        buf = io.BytesIO()
        np.save(buf, arr)
        good[f"{name}.npy"] = buf.getvalue()
    for name, fn in (("stored", np.savez), ("compressed", np.savez_compressed)):
        buf = io.BytesIO()
        fn(buf, a=np.ones(3), b=np.arange(4))
        good[f"{name}.npz"] = buf.getvalue()

    def write(files: dict[str, bytes], sub: str) -> dict[str, str]:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        out = {}
        for name, blob in files.items():
            out[name] = os.path.join(d, sub, name)
            with open(out[name], "wb") as f:
                f.write(blob)
        return out

    return write(bad, "dangerous"), write(good, "safe")


def _swap_data_pkl(valid: bytes, data_pkl: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(valid)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data_pkl if info.filename.endswith("/data.pkl")
                         else src.read(info.filename))
    return out.getvalue()


# -- the tools -------------------------------------------------------------------------------
# Each returns (flagged as dangerous, gave any finding at all, crashed).

def model_explorer_verdict(path: str) -> tuple[bool, bool, bool]:
    try:
        ckpt = mx.open(path)
    except Exception:  # noqa: BLE001 - a raise breaks the contract: count it
        return False, False, True
    crashed = any(f.code == "internal_error" for f in ckpt.findings)
    verdicts = [d["pickle"]["verdict"] for d in ckpt.details.get("files", {}).values()
                if "pickle" in d]
    return "dangerous" in verdicts, bool(ckpt.errors or ckpt.warnings), crashed


def picklescan_verdict(path: str) -> tuple[bool, bool, bool]:
    from picklescan.scanner import scan_file_path

    try:
        r = scan_file_path(path)
    except Exception:  # noqa: BLE001
        return False, False, True
    return r.infected_files > 0, bool(r.issues_count or r.scan_err or r.suspicious_count), r.scan_err


def fickling_verdict(path: str) -> tuple[bool, bool, bool]:
    from fickling.analysis import Severity
    from fickling.loader import scan_file, scan_zip_archive

    try:
        if zipfile.is_zipfile(path):
            results = list(scan_zip_archive(path, graceful=True).values())
        elif tarfile.is_tarfile(path):
            return False, False, False  # not scanned: fickling reads zips and raw pickles
        else:
            results = [scan_file(path, graceful=True)]
    except Exception:  # noqa: BLE001
        return False, False, True
    worst = max((r.severity for r in results), default=Severity.LIKELY_SAFE)
    return worst > Severity.LIKELY_SAFE, worst > Severity.LIKELY_SAFE, any(r.errors for r in results)


def modelscan_verdict(path: str) -> tuple[bool, bool, bool]:
    from modelscan.modelscan import ModelScan

    try:
        r = ModelScan().scan(path)
    except Exception:  # noqa: BLE001
        return False, False, True
    issues = r.get("issues", [])
    return bool(issues), bool(issues), bool(r.get("errors"))


TOOLS = {"model_explorer": model_explorer_verdict, "picklescan": picklescan_verdict,
         "modelscan": modelscan_verdict, "fickling": fickling_verdict}
IMPORTS = {"picklescan": "picklescan", "modelscan": "modelscan", "fickling": "fickling"}


def available() -> dict[str, str | None]:
    """tool -> None when usable, else why not."""
    out: dict[str, str | None] = {"model_explorer": None}
    for tool, module in IMPORTS.items():
        try:
            __import__(module)
            out[tool] = None
        except ImportError as e:
            out[tool] = f"not installed ({e.name}); pip install {module}"
    return out


def compare(bad: dict[str, str], good: dict[str, str], show: bool) -> dict:
    status = available()
    table = {}
    for tool, fn in TOOLS.items():
        if status[tool]:
            print(f"{tool}: {status[tool]}")
            continue
        hits = misses = silent = crashes = false = 0
        missed: list[str] = []
        t0 = time.perf_counter()
        for name, path in bad.items():
            flagged, noticed, crashed = fn(path)
            hits += flagged
            crashes += crashed
            silent += not (flagged or noticed)
            if not flagged:
                misses += 1
                missed.append(name)
        false_flags: list[str] = []
        for name, path in good.items():
            flagged, _, crashed = fn(path)
            crashes += crashed
            if flagged:
                false += 1
                false_flags.append(name)
        table[tool] = dict(detected=hits, dangerous=len(bad), false=false, safe=len(good),
                           silent=silent, crashes=crashes, seconds=time.perf_counter() - t0,
                           missed=missed, false_flags=false_flags)
    print(f"\n{'tool':<16}{'dangerous flagged':>20}{'false flags':>14}{'silent misses':>15}"
          f"{'crashes':>9}{'seconds':>9}")
    for tool, r in table.items():
        rate = f"{r['detected']}/{r['dangerous']} ({100 * r['detected'] / r['dangerous']:.1f}%)"
        print(f"{tool:<16}{rate:>20}{str(r['false']) + '/' + str(r['safe']):>14}"
              f"{r['silent']:>15}{r['crashes']:>9}{r['seconds']:>9.1f}")
    if show:
        for tool, r in table.items():
            print(f"\n{tool} missed: {', '.join(r['missed']) or '-'}")
            print(f"{tool} false flags: {', '.join(r['false_flags']) or '-'}")
    return table


# -- amplification ---------------------------------------------------------------------------

MEASURE = """
import resource, sys, time
sys.path.insert(0, {root!r})
import model_explorer as mx
t0, c0 = time.perf_counter(), time.process_time()
ckpt = mx.open({path!r})
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(dt, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(ckpt.findings),
      len(ckpt.tensors))
"""


def measure(path: str) -> tuple[float, float, int, int, int]:
    """(wall seconds, CPU seconds, peak bytes, findings, tensors) of mx.open in a fresh process
    (CPU time is the steadier figure on a shared machine)."""
    code = MEASURE.format(root=os.path.join(HERE, ".."), path=path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), int(out[3]), int(out[4])


def amplification(d: str) -> dict:
    n = 1_200_000
    path = os.path.join(d, "overlap.safetensors")
    with open(path, "wb") as f:
        parts = ",".join(f'"model.layers.{i}.q.w":'
                         '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}' for i in range(n))
        raw = ("{" + parts + "}").encode()
        f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    header_mb = len(raw) / 1e6
    secs, cpu, peak, findings, tensors = measure(path)
    print(f"\nsafetensors header of {header_mb:.0f} MB, {n:,} overlapping entries: "
          f"{secs:.1f} s ({cpu:.1f} s CPU), peak {peak / 2**30:.2f} GiB, {findings} findings, "
          f"{tensors:,} tensors listed (target: < 10 s, < 1 GiB)")
    m = 500_000
    path2 = os.path.join(d, "imports.pkl")
    with open(path2, "wb") as f:
        f.write(b"\x80\x02]" + b"".join(b"c" + f"p{i}\nC\n".encode() + b"a" for i in range(m))
                + b".")
    size2 = os.path.getsize(path2) / 1e6
    secs2, cpu2, peak2, findings2, _ = measure(path2)
    print(f"pickle of {size2:.1f} MB with {m:,} distinct imports: {secs2:.1f} s ({cpu2:.1f} s "
          f"CPU), peak {peak2 / 2**30:.2f} GiB, {findings2} findings (capped at 1,000 per code "
          "+ a summary)")
    return {"safetensors": [header_mb, secs, cpu, peak, findings],
            "pickle": [size2, secs2, cpu2, peak2, findings2]}


# Names the peers' own tests expect to be safe (picklescan's benign files, plain tensors, numpy
# object arrays of plain data, a PNG named .pt, password-protected zips it cannot open).
PEER_SAFE = ("benign", "safe", "not_a_pickle", "pytorch_model.bin", "bad_pytorch.pt", "int_array",
             "object_array", "password_protected")


def peer_dir(folder: str, show: bool) -> dict:
    """model_explorer's verdict on each file of a folder of the peers' test files."""
    bad, good = {}, {}
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith((".py", ".md", ".txt")):
                continue
            path = os.path.join(root, name)
            (good if any(k in name.lower() for k in PEER_SAFE) else bad)[name] = path
    print(f"peer files in {folder}: {len(bad)} expected dangerous, {len(good)} expected safe")
    flagged = {n: model_explorer_verdict(p) for n, p in {**bad, **good}.items()}
    hits = [n for n in bad if flagged[n][0]]
    false = [n for n in good if flagged[n][0]]
    crashed = [n for n in flagged if flagged[n][2]]
    print(f"dangerous called dangerous: {len(hits)}/{len(bad)} ({100 * len(hits) / max(1, len(bad)):.1f} %)"
          f"; safe called dangerous: {len(false)}; crashes: {len(crashed)}")
    if show:
        for n in bad:
            if not flagged[n][0]:
                print(f"  missed: {n}")
        for n in false:
            print(f"  falsely flagged: {n}")
    return {"dangerous": len(bad), "hit": len(hits), "false": len(false), "crashed": len(crashed)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--skip-amplification", action="store_true")
    p.add_argument("--list", action="store_true", help="name the missed and falsely flagged files")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--peer-dir", help="score a folder of the peers' own test files instead")
    args = p.parse_args(argv)
    if args.peer_dir:
        peer_dir(args.peer_dir, args.list)
        return 0
    with tempfile.TemporaryDirectory(prefix="mx-scanners-") as d:
        bad, good = build_corpus(d)
        print(f"corpus: {len(bad)} dangerous files, {len(good)} safe files")
        table = compare(bad, good, args.list)
        ran = os.path.exists(os.path.join(d, MARKER))
        print(f"\nmarker file created by any tool: {'YES' if ran else 'no'}")
        figures = {"scanners": table}
        if not args.skip_amplification:
            figures["amplification"] = amplification(d)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=1, default=str)
    return 1 if ran else 0


if __name__ == "__main__":
    raise SystemExit(main())
