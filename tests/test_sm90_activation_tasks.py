"""The sm_90a kernel's activation tasks for narrow tiles (16 or 32 rows), on CPU.

With narrow tiles every consumer thread decodes one 4-byte word of a row chunk
(``_narrow_act``) instead of one warp a warpgroup decoding whole 16-byte chunks. The
wgmma reads the decoded activations from a 128B-swizzled buffer, so each word must land
exactly where the 64+-row tiles' task layout puts it. The offsets are plain integer
arithmetic: this checks them for every consumer thread against the wide layout's
formula, and that the threads cover every (row, chunk, word) of a K tile once. (The
kernel module imports the DSL, so this skips without the build extra; the H200 runs
check the products.)
"""

from __future__ import annotations

import pytest

pytest.importorskip("cutlass", reason="the build extra (nvidia-cutlass-dsl) is not installed")

from nvfp4_aot.kernels import sm90_grouped_gemm as gemm  # noqa: E402
from nvfp4_aot.kernels.sm90_common import (  # noqa: E402
    NUM_CONSUMER_THREADS,
    TILE_KB,
    thread_offsets,
)


def wide_offsets(row: int, chunk: int, word: int, tile_m: int):
    """(raw byte, scale byte, [swizzled byte of register s]) of a word in the layout the
    64+-row tiles' ``_store_act`` writes (one thread a (row, 16-byte chunk))."""
    _chunk, chunk_sf_off, _w_raw, _w_sf = thread_offsets(chunk)  # lane % 4 is the chunk
    rr = row % 8
    dec = (row // 8) * 1024 + rr * 128 + chunk * 4 + (word // 2) * (tile_m * 128)
    stores = [dec + ((rr ^ (4 * (word % 2) + s)) * 16) for s in range(4)]
    sf = chunk_sf_off + gemm._sf_row_offset(row) + word // 2
    return row * TILE_KB + chunk * 16 + 4 * word, sf, stores


@pytest.mark.parametrize("tile_m", [16, 32])
def test_narrow_tasks_land_where_the_wide_layout_puts_them(tile_m):
    assert gemm._narrow(tile_m)
    seen = {}
    for tidx in range(NUM_CONSUMER_THREADS):
        chunk, chunk_sf_off, _w_raw, _w_sf = thread_offsets(tidx)
        row, sf_col, raw, rr, dec = gemm._narrow_act(tidx, tidx // 128, chunk, chunk_sf_off, tile_m)
        word = (raw - row * TILE_KB - chunk * 16) // 4
        for i in range(tile_m // 16):  # the task offsets _load_act / _store_act add
            key = (row + 8 * i, chunk, word)
            assert key not in seen, f"thread {tidx} repeats {key} (thread {seen.get(key)})"
            seen[key] = tidx
            stores = [dec + i * 1024 + ((rr ^ s) * 16) for s in range(4)]
            sf = sf_col + gemm._sf_row_offset(row) + i * 128
            assert (raw + i * 8 * TILE_KB, sf, stores) == wide_offsets(*key, tile_m), (
                f"thread {tidx}, task {i}"
            )
    assert set(seen) == {(r, c, w) for r in range(tile_m) for c in range(4) for w in range(4)}


@pytest.mark.parametrize("tile_m", [16, 32])
def test_a_warps_stores_of_one_register_hit_distinct_banks(tile_m):
    """32 lanes of a warp store register s of their words: 32 distinct 4-byte banks (no
    shared-memory bank conflict), as the wide layout's stores were."""
    for warp in range(NUM_CONSUMER_THREADS // 32):
        for s in range(4):
            banks = set()
            for lane in range(32):
                tidx = 32 * warp + lane
                chunk, chunk_sf_off, _w_raw, _w_sf = thread_offsets(tidx)
                _row, _sf, _raw, rr, dec = gemm._narrow_act(
                    tidx, tidx // 128, chunk, chunk_sf_off, tile_m
                )
                banks.add(((dec + ((rr ^ s) * 16)) // 4) % 32)
            assert len(banks) == 32, f"warp {warp}, register {s}: {32 - len(banks)} conflicts"
