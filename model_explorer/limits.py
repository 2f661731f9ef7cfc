"""Sizes past which a reader refuses a file rather than read it whole.

They live in the ground layer because both the local readers (formats/) and the Hub client
(hub.py, which sits below them) must agree on them."""

from __future__ import annotations

# A shard index (model.safetensors.index.json) is JSON read whole; the largest real ones
# (DeepSeek-V3, 90k tensors) are ~10 MiB.
MAX_INDEX_BYTES = 256 * 1024 * 1024
