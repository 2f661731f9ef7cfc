"""Operators that feed each other round a loop, found without recursion (a graph file's
operators, formats/structure.py): Kahn's algorithm removes what has no input left among the
rest, again and again; what never does is on a cycle or behind one; the same run backwards
strips what only hangs off a cycle. Linear in operators and edges, whatever the file holds.
Used by the ONNX reader (onnx/graph_check.py) and the OpenVINO reader.
"""

from __future__ import annotations

from collections import deque

from .structure import OpRecord


def on_cycles(nodes: list[OpRecord], members: list[int]) -> list[int]:
    """The members (indices into `nodes`) on a cycle or between cycles, in file order."""
    producer: dict[str, int] = {}
    for i in members:
        for v in nodes[i].outputs:
            if v:
                producer.setdefault(v, i)
    succ: dict[int, set[int]] = {i: set() for i in members}
    pred: dict[int, set[int]] = {i: set() for i in members}
    for i in members:
        for v in nodes[i].inputs:
            p = producer.get(v)
            if p is not None:
                succ[p].add(i)
                pred[i].add(p)
    left = _strip(members, pred, succ)  # what no order reaches: on a cycle or behind one
    if not left:
        return []
    inside = set(left)
    back_succ = {i: succ[i] & inside for i in left}
    back_pred = {i: pred[i] & inside for i in left}
    return sorted(_strip(left, back_succ, back_pred))  # minus what only hangs off a cycle


def _strip(members, into: dict[int, set[int]], out_of: dict[int, set[int]]) -> list[int]:
    """Kahn's algorithm: remove members with nothing coming `into` them, repeatedly; the rest."""
    degree = {i: len(into[i]) for i in members}
    queue = deque(i for i in members if degree[i] == 0)
    gone = set()
    while queue:
        i = queue.popleft()
        gone.add(i)
        for j in out_of[i]:
            if j in degree and j not in gone:
                degree[j] -= 1
                if degree[j] == 0:
                    queue.append(j)
    return [i for i in members if i not in gone]
