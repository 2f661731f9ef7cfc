"""runtime/process_memory.resident_split against what the kernel must account: pages of a mapped
file, once read, are file-backed resident memory (RssFile), and memory the process allocates and
writes is anonymous (RssAnon). The figures the llama.cpp benchmark reports beside a mapped GGUF."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from model_explorer.runtime.process_memory import current_rss, resident_split

MIB = 1 << 20
SIZE = 64 * MIB

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssAnon/RssFile are Linux's")


def test_mapped_file_pages_count_as_file_backed(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x01" * SIZE)
    anon0, file0 = resident_split()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = np.frombuffer(m, dtype=np.uint8)
        assert int(view[::4096].sum()) == SIZE // 4096  # one byte of every page: each page mapped in
        anon1, file1 = resident_split()
        del view
    assert file1 - file0 >= SIZE - 4 * MIB
    assert anon1 - anon0 < 8 * MIB


def test_written_allocation_counts_as_anonymous():
    # fresh private pages from the kernel (malloc could hand back pages left resident before;
    # a shared mapping, mmap's default, is shmem: RssShmem)
    with mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as block:
        anon0, file0 = resident_split()
        np.frombuffer(block, dtype=np.uint8)[::4096] = 1  # a byte of every page written: each resident
        anon1, file1 = resident_split()
        assert anon1 - anon0 >= SIZE - 4 * MIB
        assert abs(file1 - file0) < 8 * MIB
        assert abs(current_rss() - (anon1 + file1)) < 16 * MIB  # VmRSS: the two and shared memory
