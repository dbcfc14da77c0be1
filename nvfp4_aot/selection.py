"""Which kernel family a plan runs when several serve its device.

On sm_90a four families share one ABI. ``sm90_nvfp4_grouped_gemm`` decodes the
activation rows of every tile in the CTA that computes it, ``..._a16`` decodes all
activations once per launch into an FP16 scratch (a grid-wide first phase) and
loads them by TMA. The second saves decode work in proportion to how many N tiles
reuse each activation row, and costs its first phase, a grid barrier and the
scratch traffic; it pays when the groups are wide and K is long. The thresholds
come from H200 measurements (``docs/hopper_kernel_notes.md``, ``bench/`` logs).

``..._decode`` and ``..._decode32`` are the per-CTA kernel with 16- and 32-row
activation tiles: where groups hold a few rows (MoE decode: a few tokens per expert)
they skip the MMA and activation-decode work of 128-row tiles that are mostly empty,
and run two CTAs per SM; with more rows than its tile a group decodes each weight tile
once per tile of rows. A plan takes the narrowest of them that holds the rows it
expects per group, handing over from 16- to 32-row tiles at the measured crossover
(``NARROW_HANDOVER_ROWS``, ``docs/decode.md``); past 32 rows, the 128-row families.
"""

from __future__ import annotations

from .errors import InvalidProblemError
from .intmath import ceil_div
from .manifest import Variant

# Decoding once pays when each decoded activation row is reused by many N tiles (the
# per-CTA kernel decodes it once per N tile) and K is long enough to amortise the first
# phase and the grid barrier. H200, 32 shapes (bench/data/family_choice_shapes.json and
# the benchmarks, docs/hopper_kernel_notes.md): groups >= 4096 wide with k >= 2048 ran
# 4-20 % faster decoding once, every one of them; narrower groups (n = 2048, 3072) or
# shorter K were within -6 / +13 % (64 x (256, 2048, 4096): +13 %, the FP16 scratch no
# longer stays in L2), so they keep the per-CTA decode.
MIN_N_TILES_PER_GROUP = 32
MIN_K = 2048


# Where a wider narrow tile is baked too, the rows per group above which it took over on
# the H200 (session 11, docs/h200/session11/call6-8): 16-row tiles were 8-16 % faster at
# 2-8 rows per expert and 10-27 % slower at 16 (experts past 16 rows run two 16-row
# tiles; the routings' experts vary), so the handover lies between; 12 is its middle.
# 32-row tiles were 11-40 % faster than the 128-row families at 32 rows per expert and
# 5-44 % slower at 64: they take up to their own 32 rows.
NARROW_HANDOVER_ROWS = {16: 12}


def narrow_family(tile_m: dict[str, int], rows: float) -> str | None:
    """Among families with activation tiles narrower than the widest (``tile_m`` by
    family), the narrowest that takes ``rows`` expected rows per group, or None."""
    widest = max(tile_m.values())
    narrow = sorted((tile, f) for f, tile in tile_m.items() if tile < widest)
    for i, (tile, family) in enumerate(narrow):
        wider_baked = i + 1 < len(narrow)
        if rows <= (NARROW_HANDOVER_ROWS.get(tile, tile) if wider_baked else tile):
            return family
    return None


def decodes_activations_once(variants: list[Variant]) -> bool:
    return any(v.workspace.activation_bytes_per_element for v in variants)


def activations_once_pays(problem_sizes, tile_n: int) -> bool:
    """Whether decoding the activations once per launch is expected to be faster, for
    a family whose tiles are ``tile_n`` columns wide.

    Means are weighted by each group's activation elements (m x k).
    """
    weight = sum(m * k for m, _n, k, *_ in problem_sizes)
    if weight == 0:
        return False
    n_tiles = sum(m * k * ceil_div(n, tile_n) for m, n, k, *_ in problem_sizes) / weight
    k_mean = sum(m * k * k for m, _n, k, *_ in problem_sizes) / weight
    return n_tiles >= MIN_N_TILES_PER_GROUP and k_mean >= MIN_K


def expected_rows(problem_sizes) -> float:
    """Rows per group of host-known sizes, each group weighted by its weight elements
    n x k (what the kernels stream per row tile)."""
    weight = sum(n * k for _m, n, k, *_ in problem_sizes)
    return sum(m * n * k for m, n, k, *_ in problem_sizes) / weight if weight else 0.0


def choose_family(variants: list[Variant], problem_sizes, requested: str | None = None) -> str:
    """The family a plan over ``problem_sizes`` uses among ``variants`` (one device's).

    ``requested`` forces a family; it must be one of those baked for the device. A plan
    whose sizes the host does not know (a MoE plan: the routing is on the GPU) passes one
    group of the rows it expects.
    """
    families: dict[str, list[Variant]] = {}
    for v in variants:
        families.setdefault(v.family, []).append(v)
    if requested is not None:
        if requested not in families:
            raise InvalidProblemError(
                f"kernel {requested!r} is not baked for this device; it has "
                f"{', '.join(sorted(families))}"
            )
        return requested
    rows = expected_rows(problem_sizes)
    tile_m = {f: vs[0].tile_mnk[0] for f, vs in families.items()}
    plain = [f for f, vs in families.items() if not decodes_activations_once(vs)]
    if plain:
        narrow = narrow_family({f: tile_m[f] for f in plain}, rows)
        if narrow is not None:
            return narrow
        widest = max(tile_m[f] for f in plain)
        plain = [f for f in plain if tile_m[f] == widest]
    once = [f for f, vs in families.items() if decodes_activations_once(vs)]
    if once:
        first = sorted(once)[0]
        _tile_m, tile_n, _tile_k = families[first][0].tile_mnk
        if not plain or activations_once_pays(problem_sizes, tile_n):
            return first
    return sorted(plain)[0]
