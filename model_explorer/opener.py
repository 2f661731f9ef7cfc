"""`open(source)`: the public way in. Reads every header of a model, then runs the checks
that need only headers and side files (model/checks.py); `deep=True` adds the ones that decode
tensor data (checks/deep.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from . import hub, sources
from .assemble import assemble
from .checkpoint import Checkpoint
from .gcpause import no_gc
from .model.checks import cross_check as _cross_check
from .model.checks import header_checks


class OpenCheckpoint(Checkpoint):
    """What `mx.open` returns: a `Checkpoint` with the model layer's questions as methods.

    `Checkpoint` sits below the model layer (the tensor code and the readers use it), so these
    shortcuts live here, one floor up, where `model/` and `checks/` may be imported."""

    def card(self):
        """The model card: architecture, hyperparameters with the bytes each came from, parameters,
        quantization, tokenizer, chat template, adapter and a memory table (`mx.card`)."""
        return card(self)

    def memory(self, context: int | None = None, batch: int = 1, kv_dtype: str = "f16",
               fits: str | int | None = None):
        """Memory to run the model at `context` tokens (`mx.memory`)."""
        return memory(self, context, batch, kv_dtype, fits)

    def adapter_deltas(self, base: Any = None, plot: bool = False):
        """For a PEFT adapter: ‖B·A‖·scaling per LoRA pair, relative to the base (`mx.adapter_deltas`)."""
        return adapter_deltas(self, base, plot)

    def cross_check(self):
        """Check the tensors against transformers' own build of the architecture (meta device,
        never code from the folder), in place of the built-in tables used at open. The first
        call imports torch (seconds); returns the findings it added (`mx.open(cross_check=True)`
        does it at open; `doctor` always does)."""
        return _cross_check(self)

    def layer_profile(self, stat: str = "norm"):
        """Sampled statistics pivoted to layers x roles (`mx.layer_profile`; exact: `mx.scan`)."""
        return layer_profile(self, stat)

    def plot_layers(self, stat: str = "norm", ax=None):
        """The layer profile as a heatmap with outliers boxed (`mx.plot_layers`)."""
        return plot_layers(self, stat, ax=ax)


def open(source: str | os.PathLike, deep: bool = False, base: Any = None,  # noqa: A001
         cross_check: bool = False) -> OpenCheckpoint:
    """Open a checkpoint file, directory, index or URL and read every header in it.

    cross_check: also check the tensors against transformers' build of the architecture (what
        `doctor` does; the first one in a process imports torch, seconds). Without it the
        built-in family tables are used, so opening stays fast; `ckpt.cross_check()` later.

    base: for a PEFT adapter, the base model (a path, URL or open Checkpoint): each LoRA pair
        is checked against the base's linear layer.

    Raises FileNotFoundError / OSError only when the path itself cannot be read; whatever
    the bytes say, a Checkpoint comes back with findings that locate the problems.
    """
    path = os.fspath(source)
    repo = repos = None
    if hub.is_hub(path):
        # hf://: list the repo once and fetch its headers in parallel; what the Hub refuses
        # (not found, gated, private, rate-limited) is a finding, not an exception.
        try:
            repo = hub.begin(path)
        except hub.HubError as e:
            ckpt = OpenCheckpoint(path)
            ckpt.findings.append(e.finding(path))
            return ckpt
        repos = hub.HubRepos()  # this open's listings: its reads never see another open's
        repos.add(repo)
    with hub.reading(repos):
        if not sources.exists(sources.container(path)):  # (a member's archive: its reader finds the member)
            raise FileNotFoundError(f"No such file or directory: {path!r}")
        with no_gc():  # the parse: many small records, no cycles (gcpause.py)
            ckpt = assemble(path, OpenCheckpoint)
        ckpt.sources.hub_repos = repos
        # Config against shapes, expected tensors, tokenizer, adapter: headers and side files only.
        header_checks(ckpt)
        if repo is not None:
            hub.report(ckpt, repo)
        if cross_check:
            ckpt.cross_check()
        if base is not None:
            from .model.adapters import check_base

            with opened(base) as b:
                ckpt.details["adapter_base"] = b.source
                ckpt.findings.extend(check_base(ckpt, b))
                ckpt.findings.sort(key=lambda f: ("error", "warning", "info").index(f.severity))
        if deep:
            from .checks.deep import deep_check

            deep_check(ckpt)
    return ckpt


# -- the model one level up: public functions over a path or an open Checkpoint ----------------------
# (model/ sits below the opener, so these live here: they open what they are given.)

def card(source: Any):
    """The model card (model/card.py): architecture, hyperparameters with the bytes each came
    from, parameters, tokenizer, chat template, adapter and a memory table."""
    from .model.card import card as make_card

    with opened(source) as ckpt:
        return make_card(ckpt)


def graph(source: Any):
    """The graph the files record (model/graph.py): `.nodes` and `.edges` as DataFrames, each
    operator with the weights it reads and the bytes of its record; `.outline()` in words."""
    from .model.graph import graph_of

    with opened(source) as ckpt:
        return graph_of(ckpt)


def memory(source: Any, context: int | None = None, batch: int = 1, kv_dtype: str = "f16",
           fits: str | int | None = None):
    """Memory to run the model at `context` tokens (model/memory.py): weights as stored and as
    the demo holds them, KV cache, activations, a stated margin; with `fits="24GB"` whether it
    fits and the largest context that does."""
    from .model.memory import estimate

    with opened(source) as ckpt:
        return estimate(ckpt, context, batch, kv_dtype, fits)


def adapter_deltas(adapter: Any, base: Any = None, plot: bool = False):
    """Per LoRA pair: ‖B·A‖·scaling and, with a base model, its ratio to the base weight's norm
    (a DataFrame; `plot=True` also draws it)."""
    from .model.adapters import delta_table, plot_deltas

    with opened(adapter) as a:
        base = base if base is not None else a.details.get("adapter_base")
        if base is None:
            table = delta_table(a)
        else:
            with opened(base) as b:
                table = delta_table(a, b)
    if plot:
        plot_deltas(table)
    return table


def diff(a: Any, b: Any, values: bool = True, tokenizers: bool = True):
    """Compare two checkpoints (paths, URLs or open Checkpoints) tensor by tensor; returns a pandas
    DataFrame, one row per tensor (checks/diff.py says what each column means)."""
    from .checks import diff as compare

    with opened(a) as ca, opened(b) as cb:
        return compare.diff(ca, cb, values, tokenizers)


def _layer_source(source: Any):
    """A per-tensor table as is; anything else as an open checkpoint, for a moment."""
    import pandas as pd

    return contextlib.nullcontext(source) if isinstance(source, pd.DataFrame) else opened(source)


def layer_profile(source: Any, stat: str = "norm"):
    """Layers x tensor roles of `stat` (checks/layers.py) from a per-tensor table (`mx.scan`,
    `stats_table`), an open checkpoint or a path (sampled statistics)."""
    from .checks import layers

    with _layer_source(source) as s:
        return layers.layer_profile(s, stat)


def layer_findings(source: Any, stat: str = "norm"):
    """`layer_outlier` / `layer_duplicate` findings of the layer profile."""
    from .checks import layers

    with _layer_source(source) as s:
        return layers.layer_findings(s, stat)


def plot_layers(source: Any, stat: str = "norm", ax=None, mark: bool = True):
    """The layer profile as a matplotlib heatmap, outliers boxed; returns the Axes."""
    from .checks import layers

    with _layer_source(source) as s:
        return layers.plot_layers(s, stat, ax=ax, mark=mark)


def as_checkpoint(source: Any) -> Checkpoint:
    """A Checkpoint as given, or the one `open` makes of a path or URL."""
    return source if isinstance(source, Checkpoint) else open(source)


@contextlib.contextmanager
def opened(source: Any) -> Iterator[Checkpoint]:
    """`as_checkpoint` for a moment: closes what it opened, leaves a caller's Checkpoint open."""
    ckpt = as_checkpoint(source)
    try:
        with hub.reading(ckpt.sources.hub_repos):  # an hf:// model's side files: its own listing
            yield ckpt
    finally:
        if ckpt is not source:
            ckpt.close()
