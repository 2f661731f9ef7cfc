"""Will a run fit? What the numpy engine will hold, against what this process may still use.

A run that does not fit must not start: the kernel's out-of-memory killer takes the whole
notebook kernel with it. Before loading, `plan` compares two needs with the memory available:

- in memory: every weight as float32 (what the numpy engine holds), the float32 KV cache of
  the prompt, the activations of one prefill chunk and the process itself (model/memory.py's
  estimate, the figure `mx.memory` prints as the demo's need);
- streamed: one block of rows as float32 at a time (decoded from the file's own blocks into the
  matmul: runtime/streamed.py), or, for a layer that cannot go block by block (experts, latent
  attention, transposed or regrouped layouts), that layer's weights as float32 with the copies
  fusing q/k/v and gate/up makes; the KV cache, the activations and the process.

Available memory is the smaller of the kernel's MemAvailable and what the process's cgroup (a
container, a notebook server's limit) still allows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..model import memory as model_memory
from ..model.hparam_shapes import ANY_LAYER as _LAYER
from ..units import format_bytes
from .streamed import BLOCK_BYTES, BUFFERS, streams_by_blocks

# A layer decoded whole holds its float32 weights up to three times while it is built: the
# decoded tensors, the fused q/k/v and gate/up matrices made from them, the next read's blocks.
LAYER_COPIES = 3
# What is left for the page cache and the notebook itself: never plan to the last byte.
HEADROOM = 0.9


@dataclass(frozen=True)
class RunPlan:
    """What a run will hold and where: `mode` is "in_memory", "streamed" or "refused"."""

    mode: str
    in_memory_bytes: int
    streamed_bytes: int
    available_bytes: int | None
    text: str

    @property
    def streams(self) -> bool:
        return self.mode == "streamed"


class WontFit(MemoryError):
    """Raised before loading when even a streamed run needs more memory than is available."""

    def __init__(self, plan: RunPlan) -> None:
        super().__init__(plan.text)
        self.plan = plan


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> int | None:
    """Bytes the process's cgroup still allows (v2, else v1), or None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is None or limit >= 1 << 60:  # "max", or v1's "no limit" sentinel
            continue
        usage = _read_int(usage_file) or 0
        return max(0, limit - usage)
    return None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_bytes() -> int | None:
    """Memory this process may still allocate: min(MemAvailable, the cgroup's room); None when
    neither can be read (not Linux): then nothing is refused."""
    override = os.environ.get("MODEL_EXPLORER_MEMORY_AVAILABLE")
    if override:
        return model_memory.parse_size(override)
    figures = [f for f in (_mem_available(), _cgroup_room()) if f is not None]
    return min(figures) if figures else None


def _layer_numels(ckpt) -> dict[int, int]:
    per_layer: dict[int, int] = {}
    for name, info in ckpt.tensors.items():
        m = _LAYER.search(name)
        if m:
            per_layer[int(m.group(1))] = per_layer.get(int(m.group(1)), 0) + info.numel
    return per_layer


def _head_shape(ckpt) -> tuple[int, int]:
    """(rows, width) of the largest 2-D tensor outside the layers: the embedding or output head."""
    shapes = [tuple(info.shape) for name, info in ckpt.tensors.items()
              if not _LAYER.search(name) and len(info.shape) == 2]
    big = max(shapes, key=lambda s: s[0] * s[1], default=(0, 0))
    return max(big), min(big)


def needs(ckpt, tokens: int, cfg=None) -> tuple[int, int]:
    """(in-memory bytes, streamed bytes) of a numpy run over `tokens` positions. With the
    model's `cfg`, layers that stream block by block count one block; without it, every
    layer counts as decoded whole (an upper bound)."""
    est = model_memory.estimate(ckpt, context=max(1, tokens))
    fixed = est.demo_total_bytes - est.demo_weights_bytes  # KV (float32), activations, the process
    vocab, width = _head_shape(ckpt)
    logits = 4 * tokens * vocab  # every position's logits
    whole_layers = [n for i, n in _layer_numels(ckpt).items() if cfg is None or not streams_by_blocks(ckpt, cfg, i)]
    layer = max([LAYER_COPIES * 4 * n for n in whole_layers] + [BUFFERS * BLOCK_BYTES])
    return est.demo_total_bytes, fixed + layer + logits


def plan(ckpt, tokens: int, stream: bool | None = None, available: int | None = None, cfg=None) -> RunPlan:
    """Decide how a numpy run of `tokens` positions goes: in memory when it fits (or when
    `stream` is False and it fits), streamed when only that fits (or `stream` is True), else
    refused with the figures and the choices. `cfg`: the model's config (see `needs`)."""
    whole, streamed = needs(ckpt, tokens, cfg)
    room = available if available is not None else available_bytes()
    budget = None if room is None else int(room * HEADROOM)
    if budget is None:
        mode = "streamed" if stream else "in_memory"
    elif stream is not True and whole <= budget:
        mode = "in_memory"
    elif stream is not False and streamed <= budget:
        mode = "streamed"
    else:
        mode = "refused"
    return RunPlan(mode, whole, streamed, room, _text(mode, whole, streamed, room, tokens, stream))


def _text(mode: str, whole: int, streamed: int, room: int | None, tokens: int, stream: bool | None) -> str:
    have = "unknown" if room is None else format_bytes(room)
    if mode == "in_memory":
        return (f"fits: holding every weight as float32 takes about {format_bytes(whole)}; "
                f"{have} available")
    if mode == "streamed":
        why = "as asked" if stream else f"holding it whole would take {format_bytes(whole)}, {have} available"
        return (f"streamed ({why}): each matrix is dequantized from the file block by block as the "
                f"pass reaches it and let go after, about {format_bytes(streamed)} at the peak")
    forced = " (stream=False)" if stream is False else ""
    return (f"refused before loading{forced}: a run over {tokens} tokens needs about {format_bytes(whole)} "
            f"with every weight in memory and {format_bytes(streamed)} streamed layer by layer, and this "
            f"process has {have} available. Choices: a shorter prompt; llama.cpp for a GGUF "
            "(backend='llama.cpp' runs the file's own blocks); torch on a GPU (device='cuda'); "
            "or more memory (a larger machine or container limit).")
