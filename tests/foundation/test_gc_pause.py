"""What mx.open builds while the cyclic GC is paused lands in the oldest generation, so the
young collections after it do not rescan hundreds of thousands of records (a 0.2 s pause that
used to land in whatever ran next, an Explorer's first paint). The pause is one per process and
held by count: threads that pause together leave the collector on only when the last one ends."""

from __future__ import annotations

import gc
import threading

import numpy as np

import model_explorer as mx
from model_explorer.gcpause import PAUSE, no_gc


def test_objects_built_while_paused_go_to_the_oldest_generation():
    assert gc.isenabled()
    with no_gc():
        made = [[i] for i in range(50_000)]  # lists are always tracked
        assert not gc.isenabled()
    assert gc.isenabled()
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert not any(id(d) in young for d in made[::1000])
    old = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(d) in old for d in made[::1000])


def test_a_pause_inside_a_pause_leaves_the_gc_to_the_outer_one():
    with no_gc():
        with no_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_open_leaves_its_records_out_of_the_young_generation(tmp_path):
    from safetensors.numpy import save_file

    save_file({f"t{i}": np.zeros(1, np.float32) for i in range(3000)}, str(tmp_path / "m.safetensors"))
    ckpt = mx.open(tmp_path / "m.safetensors")
    records = list(ckpt.tensors.values())  # built in a pause of their own
    old = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(r) in old for r in records[::100])


def test_garbage_from_before_the_pause_is_not_moved_to_the_oldest_generation():
    # A user's dropped object in a reference cycle is collected when a pause begins, not held
    # until a full collection.
    import weakref

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    with no_gc():
        pass
    assert alive() is None


def test_objects_someone_else_froze_stay_frozen():
    keep = [[i] for i in range(1000)]
    gc.freeze()
    try:
        with no_gc():
            made = [[i] for i in range(1000)]
        # still frozen (objects freed meanwhile lower the count; an unfreeze would zero it)
        assert gc.get_freeze_count() >= len(keep) and made
    finally:
        gc.unfreeze()


def _in_thread(target) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_one_threads_pause_ending_leaves_the_other_threads_pause_alone():
    # A widget job builds in its own thread while the kernel's thread opens a model: whichever
    # ends first must not turn the collector back on under the other's build.
    a_in, b_in, a_out, b_may_leave = (threading.Event() for _ in range(4))
    seen = {}

    def a():
        with no_gc():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with no_gc():
            b_in.set()
            a_out.wait(5)
            seen["while_b_holds"] = gc.isenabled()
            b_may_leave.wait(5)

    threads = [_in_thread(a), _in_thread(b)]
    a_out.wait(5)
    b_may_leave.set()
    for t in threads:
        t.join(5)
    assert seen == {"while_b_holds": False}
    assert gc.isenabled() and PAUSE.holders == 0


def test_pauses_from_many_threads_end_with_the_collector_on():
    start = threading.Barrier(8)

    def work():
        start.wait(5)
        for _ in range(200):
            with no_gc():
                with no_gc():
                    assert not gc.isenabled()

    threads = [_in_thread(work) for _ in range(8)]
    for t in threads:
        t.join(30)
    assert gc.isenabled() and PAUSE.holders == 0


def test_a_collector_the_user_disabled_stays_disabled():
    gc.disable()
    try:
        with no_gc():
            pass
        t = _in_thread(PAUSE.enter)  # a holder in another thread, still holding
        t.join(5)
        assert not gc.isenabled()
    finally:
        PAUSE.leave()  # the thread's pause
        gc.enable()
    assert PAUSE.holders == 0
