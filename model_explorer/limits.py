"""Sizes past which a reader refuses a file rather than read it whole.

They live in the ground layer because both the local readers (formats/) and the Hub client
(hub.py, which sits below them) must agree on them."""

from __future__ import annotations

# A shard index (model.safetensors.index.json) is JSON read whole; the largest real ones
# (DeepSeek-V3, 90k tensors) are ~10 MiB.
MAX_INDEX_BYTES = 256 * 1024 * 1024

# A compressed archive member (a deflated .pt inside a wheel or a TorchServe .mar) is inflated
# into memory to be read; past this size it is refused with a finding (stored members are read
# in place, whatever their size).
MAX_INFLATED_MEMBER = 1024 * 1024 * 1024
