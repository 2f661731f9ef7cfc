"""The named points of a decoder's forward pass, the one vocabulary a trace, compare_runs, the
runs view and the block graph share: (layer, module), layer None outside the layers.

The decoder (runtime/decoder.py) records them in this order; the block graph (block_graph.py)
puts each on the node that computes it, so a run's point finds its node.
"""

from __future__ import annotations

# The points of one layer, in the order it computes them. Every family records the same names,
# so two runs of different formats or families line up module by module.
LAYER_MODULES = ("attn_norm", "q", "k", "v", "attn_out", "attn_residual", "ffn_norm", "ffn_out",
                 "residual")
MODULES = ("embed", *LAYER_MODULES, "final_norm", "logits")
