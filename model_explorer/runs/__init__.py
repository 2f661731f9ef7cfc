"""Run-level debugging: what a model computes, and where two runs of it part ways.

`trace` records statistics of every named activation of one forward pass; `compare_runs` runs two
checkpoints on the same token ids and says where they part ways (agree, drift or jump);
`quantizations` and `backends` compare one prompt across quantizations and engines. The widgets
that draw them live in widgets/ (runs_view, run_cell); `state` is the summary they are sent.
"""
