"""The Graph tab in a real JupyterLab (issue 40): a small ONNX file built here with onnx.helper,
names scoped as torch.onnx writes them. The tab draws its layers as closed groups (each drawn box
carries data-node-id inside .me-graph), a click opens one to exactly the nodes onnx lists under
that scope, search opens the groups of the first node onnx lists with that op and marks it, and
a click on a node moves the hexdump and the Tensors tab to the initializer it reads (its bytes as
mx.open reads them). `graph.show()` draws the same view alone. One server, one notebook."""

from __future__ import annotations

import numpy as np
import pytest
from labserver import run_cells, screenshot

import model_explorer as mx

pytestmark = pytest.mark.browser
onnx = pytest.importorskip("onnx")
LAYERS = 4


def scoped_onnx(path):
    """LAYERS blocks of MatMul (q, k) -> Softmax -> MatMul (o), then a head, as torch.onnx names them."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, prev = [], [], "x"
    for i in range(LAYERS):
        scope = f"/model/layers.{i}"
        for proj in ("q", "k"):
            w = f"model.layers.{i}.{proj}_proj.weight"
            inits.append(numpy_helper.from_array(np.full((8, 8), i + 1, np.float32), w))
            nodes.append(helper.make_node("MatMul", [prev, w], [f"{scope}/{proj}_out"], name=f"{scope}/{proj}_proj/MatMul"))
        nodes.append(helper.make_node("Add", [f"{scope}/q_out", f"{scope}/k_out"], [f"{scope}/s"], name=f"{scope}/Add"))
        nodes.append(helper.make_node("Softmax", [f"{scope}/s"], [f"{scope}/p"], name=f"{scope}/Softmax", axis=-1))
        w = f"model.layers.{i}.o_proj.weight"
        inits.append(numpy_helper.from_array(np.eye(8, dtype=np.float32), w))
        nodes.append(helper.make_node("MatMul", [f"{scope}/p", w], [f"{scope}/out"], name=f"{scope}/o_proj/MatMul"))
        prev = f"{scope}/out"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="/lm_head/Relu"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def made(lab):
    return scoped_onnx(lab[1] / "scoped.onnx")


@pytest.fixture(scope="module")
def page(lab, made, chromium):
    url, home = lab
    p = run_cells(chromium, url, home, "graph.ipynb",
                  ["import model_explorer as mx", f"mx.explore({str(made)!r})", f"mx.graph({str(made)!r}).show()"],
                  "document.querySelectorAll('.me-explorer').length >= 1 && document.querySelector('.me-root.me-graph')")
    yield p
    p.close()


def drawn(ex) -> set[str]:
    return {k for k in ex.locator(".me-graph [data-node-id]").evaluate_all("els => els.map(e => e.getAttribute('data-node-id'))")}


def wait_ready(page, ex) -> None:
    page.wait_for_function("el => el.dataset.state === 'ready' || el.dataset.state === 'error'",
                           arg=ex.locator(".me-graph").element_handle(), timeout=30_000)
    assert ex.locator(".me-graph").get_attribute("data-state") == "ready", ex.locator(".me-graph-status").inner_text()


def test_graph_tab_groups_expand_search_and_select_bytes(page, made):
    model = onnx.load(str(made))
    ex = page.locator(".me-explorer").first
    ex.locator(".me-tab", has_text="Graph").click()
    wait_ready(page, ex)
    # First view: the "model" scope opened by itself, its layers closed, one box each.
    first = drawn(ex)
    layers = {f"g:model/layers.{i}" for i in range(LAYERS)}
    assert layers <= first and not any(k.startswith("n:/model/") for k in first), first
    assert ex.locator(".me-graph-group[data-node-id='g:model/layers.2'] .me-graph-sub").text_content().startswith("5 ops")
    # A click opens layer 1: what is drawn inside is what onnx lists under its scope, a node
    # under a deeper scope (q_proj/MatMul) as that scope's closed group.
    ex.locator(".me-graph [data-node-id='g:model/layers.1']").click()
    page.wait_for_function("el => el.querySelector(\"[data-node-id='n:/model/layers.1/Softmax']\")",
                           arg=ex.locator(".me-graph").element_handle(), timeout=30_000)
    wait_ready(page, ex)
    inner = {k for k in drawn(ex) if k.startswith(("n:/model/layers.1/", "g:model/layers.1/"))}
    rest = [n.name[len("/model/layers.1/"):] for n in model.graph.node if n.name.startswith("/model/layers.1/")]
    assert inner == {f"g:model/layers.1/{r.split('/')[0]}" if "/" in r else f"n:/model/layers.1/{r}" for r in rest}
    screenshot(page, "graph-tab-open-group", ex.locator(".me-graph"))
    # Search by op: the first Softmax onnx lists (layer 0, still closed) is opened and marked.
    target = next(n.name for n in model.graph.node if n.op_type == "Softmax")
    ex.locator(".me-graph-search").fill("softmax")
    ex.locator(".me-graph-search").press("Enter")
    hit = ex.locator(f".me-graph-hit[data-node-id='n:{target}']")
    hit.wait_for(timeout=30_000)
    # the node's details come from the kernel after the mark is drawn: wait for them
    page.wait_for_function("el => el.innerText.includes('Softmax')",
                           arg=ex.locator(".me-graph-details").element_handle(), timeout=30_000)
    # A click on a node selects the weight it reads: the hexdump lands on its first byte,
    # the Tensors tab selects its row.
    weight = "model.layers.1.q_proj.weight"
    info = mx.open(made).tensors[weight]
    ex.locator(".me-graph [data-node-id='g:model/layers.1/q_proj']").click()
    node = ex.locator(".me-graph [data-node-id='n:/model/layers.1/q_proj/MatMul']")
    node.wait_for(timeout=30_000)
    wait_ready(page, ex)
    node.click()
    page.wait_for_function("([el, off]) => el.querySelector(`.me-b.me-hl[data-off='${off}']`)",
                           arg=[ex.locator(".me-hexdump").element_handle(), info.offset], timeout=30_000)
    ex.locator(".me-graph-details", has_text=weight).wait_for(timeout=30_000)
    ex.locator(".me-tab", has_text="Tensors").click()
    ex.locator(f".me-table-row.me-selected[data-tensor='{weight}']").wait_for(timeout=30_000)
    assert not page.errors, page.errors


def test_graph_show_draws_the_view_alone(page, made):
    alone = page.locator(".me-root.me-graph")
    page.wait_for_function("el => el.dataset.state === 'ready' || el.dataset.state === 'error'",
                           arg=alone.element_handle(), timeout=30_000)
    assert alone.get_attribute("data-state") == "ready", alone.locator(".me-graph-status").inner_text()
    keys = set(alone.locator("[data-node-id]").evaluate_all("els => els.map(e => e.getAttribute('data-node-id'))"))
    assert {f"g:model/layers.{i}" for i in range(LAYERS)} <= keys
    alone.locator("[data-node-id='g:lm_head']").click()
    alone.locator("[data-node-id='n:/lm_head/Relu']").click()
    alone.locator(".me-graph-details", has_text="Relu").wait_for(timeout=30_000)
    assert "record:" in alone.locator(".me-graph-details").inner_text()
    assert not page.errors, page.errors
