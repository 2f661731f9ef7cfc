"""What one open reads and counts is its own: each open lists its repo (a fresh HfFileSystem
with its own counting API client), reads outside an open list afresh, a checkpoint keeps the
listing it was opened with, and nothing is hooked on huggingface_hub's shared HTTP session."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("huggingface_hub")

import model_explorer as mx  # noqa: E402
from model_explorer import hub, sources  # noqa: E402

from . import hub_layouts as L  # noqa: E402
from .fakehub import FakeHub, Repo  # noqa: E402


@pytest.fixture
def live(monkeypatch):
    """A server of its own: the test changes a repo between opens."""
    with FakeHub({"org/live": Repo({"main": L.gptq(4)}), "org/other": Repo({"main": L.lora_adapter()})}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield server


def test_a_read_after_an_open_sees_the_repo_as_it_is_now(live):
    first = mx.open("hf://org/live")
    assert not sources.exists("hf://org/live/notes.json")
    live.repos["org/live"].revisions["main"]["notes.json"] = b'{"a": 1}'  # pushed after the open
    # Outside any open a read lists the repo afresh: the first open's listing is not consulted.
    assert sources.exists("hf://org/live/notes.json")
    assert "notes.json" in sources.listdir("hf://org/live")
    second = mx.open("hf://org/live")
    assert second.sources.hub_repos is not first.sources.hub_repos
    # Each checkpoint keeps the listing it was opened with, for its own later reads.
    with hub.reading(first.sources.hub_repos):
        assert not sources.exists("hf://org/live/notes.json")
    with hub.reading(second.sources.hub_repos):
        assert sources.exists("hf://org/live/notes.json")
    assert not sources.exists("hf://org/live/missing.json")


def test_the_count_is_the_opens_own_even_when_opens_overlap(live):
    live.reset()
    alone = mx.open("hf://org/live").details["hub"]
    assert alone["requests"] == len(live.log)  # counted at the client as the server saw them
    results, start = {}, threading.Barrier(4)

    def work(i: int, path: str) -> None:
        start.wait(10)
        results[i] = mx.open(path).details["hub"]

    threads = [threading.Thread(target=work, args=(i, p)) for i, p in
               enumerate(["hf://org/live", "hf://org/live", "hf://org/other", "hf://org/live"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in (0, 1, 3):
        assert results[i]["api_requests"] == alone["api_requests"], results[i]
        assert results[i]["requests"] == alone["requests"], results[i]


def test_no_hook_is_left_on_the_shared_session(live):
    from huggingface_hub.utils import get_session

    before = {k: list(v) for k, v in get_session().event_hooks.items()}
    mx.open("hf://org/live")
    assert {k: list(v) for k, v in get_session().event_hooks.items()} == before
