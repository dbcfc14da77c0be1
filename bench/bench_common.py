"""Helpers shared by the torch benchmarks (bench_grouped_gemm.py, bench_moe.py): CUDA-event
timing, the ceilings measured in the same run, and exact FP4 dequantization in torch.

torch is used only by the benchmarks, as the baseline and to make data; the runtime under
test never imports it.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time

import torch

FP4_VALUES = torch.tensor(
    [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32
)


# FP4 operands --------------------------------------------------------------------------


def blocked_index(rows: int, cols: int, device, first_row: int = 0) -> torch.Tensor:
    """Byte offset in the blocked scale layout of every (row, scale column), for rows
    ``first_row .. first_row + rows`` of a blocked buffer (a first row that is a multiple
    of 128 is where a segment of its own starts, as in the MoE contiguous layout)."""
    r = torch.arange(first_row, first_row + rows, device=device).view(-1, 1)
    c = torch.arange(cols, device=device).view(1, -1)
    atoms_k = (cols + 3) // 4
    return ((r // 128) * atoms_k + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def blocked_bytes(rows: int, k: int) -> int:
    return ((rows + 127) // 128) * ((k // 16 + 3) // 4) * 512


def dequantize(
    packed: torch.Tensor, blocked: torch.Tensor, rows: int, k: int, first_row: int = 0
) -> torch.Tensor:
    """FP4 (rows, k/2) bytes + blocked E4M3 scales -> BF16 (rows, k), exact."""
    table = FP4_VALUES.to(packed.device)
    lo = table[(packed & 0xF).long()]
    hi = table[(packed >> 4).long()]
    values = torch.stack((lo, hi), dim=-1).view(rows, k)
    index = blocked_index(rows, k // 16, packed.device, first_row)
    scales = blocked[index].view(torch.float8_e4m3fn).float()
    return (values.view(rows, k // 16, 16) * scales.unsqueeze(-1)).view(rows, k).to(torch.bfloat16)


def random_scales(size: int, device) -> torch.Tensor:
    """E4M3 bytes 0x28..0x37: 0.25 <= scale < 1, finite, never zero."""
    return torch.randint(0x28, 0x38, (size,), dtype=torch.uint8, device=device)


def finite_or_inf(value: float) -> float:
    """NaN (an unwritten output) must not vanish in max()."""
    return value if math.isfinite(value) else float("inf")


# timing -------------------------------------------------------------------------------


def time_events(fn, sets, repeats: int, per_batch: int = 10) -> list[float]:
    """Per-call milliseconds from CUDA events, one sample per batch of ``per_batch``
    back-to-back calls (cycling through the input sets).

    One event pair around each single call would also time the host's launch overhead
    whenever the GPU finishes a call before the next one is queued (small shapes), and
    the torch baselines pay more of that than we do; a batch of queued calls measures
    the GPU.
    """
    for s in sets:  # warm-up, includes any lazy load
        fn(s)
    torch.cuda.synchronize()
    batches = max(5, repeats // per_batch)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(batches)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(batches)]
    i = 0
    for batch in range(batches):
        starts[batch].record()
        for _ in range(per_batch):
            fn(sets[i % len(sets)])
            i += 1
        ends[batch].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) / per_batch for a, b in zip(starts, ends)]


def time_graph(
    fn, sets, repeats: int, per_graph: int = 10, capture_error_mode: str = "global"
) -> list[float]:
    """Per-call milliseconds of ``fn`` replayed from a CUDA graph of ``per_graph`` calls
    (cycling through the input sets): the GPU time with no host launch overhead at all,
    for baselines whose host path is slower than their kernels. ``capture_error_mode``
    is torch.cuda.graph's."""
    for s in sets:
        fn(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
        for i in range(per_graph):
            fn(sets[i % len(sets)])
    per_replay = time_events(lambda _: graph.replay(), [None], repeats // per_graph, per_batch=1)
    return [ms / per_graph for ms in per_replay]


class GpuHold:
    """``torch.cuda._sleep`` for a given time: holds the stream while the host queues work
    behind it, so that event pairs around single short launches time the GPU, not gaps
    where it waited for the host."""

    def __init__(self):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        torch.cuda._sleep(cycles)  # warm-up
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_ms = cycles / start.elapsed_time(end)

    def __call__(self, ms: float) -> None:
        torch.cuda._sleep(int(ms * self.cycles_per_ms))


def time_steps(prepare, body, steps: int, hold: GpuHold, chunk: int = 32):
    """Microseconds of ``body(i)`` for steps i = 0 .. steps - 1, from an event pair around
    each, with ``prepare(i)`` queued before it outside the pair (a new routing, say).

    Steps are queued in chunks behind a GPU hold longer than the host takes to queue the
    chunk, so the GPU never waits for the host inside a pair. Returns (times, starved):
    starved counts the chunks whose hold ended before the host had queued them (the
    next hold is longer)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    released = torch.cuda.Event()
    hold_ms, starved = 2.0, 0
    for first in range(0, steps, chunk):
        hold(hold_ms)
        released.record()
        began = time.perf_counter()
        for i in range(first, min(first + chunk, steps)):
            prepare(i)
            starts[i].record()
            body(i)
            ends[i].record()
        queued_ms = (time.perf_counter() - began) * 1e3
        if released.query():  # the hold was over before the chunk was queued
            starved += 1
        hold_ms = max(0.2, 2 * queued_ms)
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in zip(starts, ends)], starved


def time_graph_steps(fn, prepare, steps: int, hold: GpuHold):
    """``fn()`` captured once in a CUDA graph, its replays timed by :func:`time_steps`
    (``prepare(i)`` queued before each, outside the pair): (µs per replay, starved)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_steps(prepare, lambda _i: graph.replay(), steps, hold)


# ceilings -----------------------------------------------------------------------------


def copy_bandwidth(device) -> float:
    """Device-to-device copy rate: bytes read + written per second (1 GiB copies)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_ms = statistics.median(time_events(lambda _: dst.copy_(src), [None], 30, per_batch=1))
    return 2 * n / (copy_ms * 1e-3)


def same_bytes_copy(moved: int, device):
    """One kernel reading and writing ``moved`` bytes in all (half each; a 16-byte
    vectorized elementwise kernel, not a memcpy node, which a graph may give to a copy
    engine), as a callable: timed beside a kernel that moves as many bytes, it is what
    moving them costs at this size, launch and ramp-up included, where the floor is the
    rate of a 1 GiB copy. Its buffers are reused, so small ones stay in L2 (a floor no
    kernel reading fresh data can beat)."""
    src = torch.empty(max(4, moved // 8), dtype=torch.int32, device=device).random_()
    dst = torch.empty_like(src)
    return lambda *_: torch.bitwise_not(src, out=dst)


# same_bytes_copy's work as a PDL kernel: it lets the next grid launch at once and waits
# for the one before it only before its first load, as our kernels do (PTX, JIT-compiled
# by the driver: no compiler needed on the GPU machine)
PDL_COPY_SYMBOL = "same_bytes_copy_pdl"
PDL_COPY_THREADS = 256
PDL_COPY_PTX = f"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry {PDL_COPY_SYMBOL}(
    .param .u64 source,
    .param .u64 destination,
    .param .u64 vectors)
{{
    .reg .pred p;
    .reg .b32 cta, threads, ctas, t, v<4>;
    .reg .b64 src, dst, n, i, stride, offset, at;
    griddepcontrol.launch_dependents;
    ld.param.u64 src, [source];
    ld.param.u64 dst, [destination];
    ld.param.u64 n, [vectors];
    cvta.to.global.u64 src, src;
    cvta.to.global.u64 dst, dst;
    mov.u32 cta, %ctaid.x;
    mov.u32 threads, %ntid.x;
    mov.u32 t, %tid.x;
    mov.u32 ctas, %nctaid.x;
    mul.wide.u32 i, cta, threads;
    cvt.u64.u32 offset, t;
    add.u64 i, i, offset;
    mul.wide.u32 stride, ctas, threads;
    griddepcontrol.wait;
LOOP:
    setp.ge.u64 p, i, n;
    @p bra DONE;
    shl.b64 offset, i, 4;
    add.u64 at, src, offset;
    ld.global.v4.b32 {{v0, v1, v2, v3}}, [at];
    not.b32 v0, v0;
    not.b32 v1, v1;
    not.b32 v2, v2;
    not.b32 v3, v3;
    add.u64 at, dst, offset;
    st.global.v4.b32 [at], {{v0, v1, v2, v3}};
    add.u64 i, i, stride;
    bra LOOP;
DONE:
    ret;
}}
"""


def same_bytes_copy_pdl(
    moved: int, device, *, ctas: int | None = None, shared_bytes: int = 0, pdl: bool = True
):
    """:func:`same_bytes_copy` launched as our kernels are launched: with programmatic
    stream serialization (PDL), through nvfp4_aot.driver. In a chain of runs (a graph's
    replay) its launch and ramp-up overlap the run before it, as the quantizer's do, so
    it is what moving the bytes costs at this size for a kernel launched like ours; the
    plain launch above pays its whole launch every run. One 16-byte vector a thread (a
    grid-stride loop past 65535 CTAs). The first run's bytes are checked before the
    callable is returned.

    For experiments on a kernel's own grid: ``ctas`` CTAs instead (the loop strides over
    the vectors), ``shared_bytes`` of dynamic shared memory a CTA (unused: it bounds the
    CTAs an SM holds), ``pdl=False`` a plain launch; ``moved=0`` copies nothing."""
    from nvfp4_aot import driver

    vectors = -(-moved // 32)  # half the bytes read, in 16-byte vectors
    src = torch.empty(4 * vectors, dtype=torch.int32, device=device).random_()
    dst = torch.zeros_like(src)
    ordinal = device.index or 0
    driver.activate(ordinal)
    library = driver.library_load_data(PDL_COPY_PTX.encode() + b"\0")
    function = driver.kernel_get_function(driver.library_get_kernel(library, PDL_COPY_SYMBOL))
    if shared_bytes:
        driver.function_set_attribute(
            function, driver.FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes
        )
    if ctas is None:
        ctas = max(1, min(-(-vectors // PDL_COPY_THREADS), 65535))
    attributes = [(driver.LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, (1,))] if pdl else []
    spec = driver.LaunchSpec(
        function,
        driver.launch_config((ctas, 1, 1), (PDL_COPY_THREADS, 1, 1), shared_bytes, attributes),
    )
    values = (ctypes.c_uint64 * 3)(src.data_ptr(), dst.data_ptr(), vectors)
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(values) + 8 * i for i in range(3)))

    def copy(*_):
        spec.use_stream(torch.cuda.current_stream(device).cuda_stream)
        driver.launch(spec.function, spec.config, ctypes.addressof(params))

    copy()
    torch.cuda.synchronize(device)
    if not torch.equal(dst, torch.bitwise_not(src)):
        raise RuntimeError(f"{PDL_COPY_SYMBOL} wrote wrong bytes")
    copy.keeps = (src, dst, values, params, library)  # alive while the callable is
    return copy


def bf16_flops(device) -> float:
    """FLOP/s of an 8192^3 BF16 matmul."""
    x = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    y = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    mm_ms = statistics.median(time_events(lambda _: x @ y, [None], 30, per_batch=1))
    return 2 * 8192**3 / (mm_ms * 1e-3)


def measure_ceilings(device):
    """Copy bandwidth (bytes read + written per second) and BF16 matmul FLOP/s."""
    return copy_bandwidth(device), bf16_flops(device)


# host speed ------------------------------------------------------------------------------

# the Python probe: ~0.15 ms on a full-speed vCPU of the lent H200's host (bench/host_cores.py)
PROBE_LOOPS = 5_000


def python_probe_us(loops: int = PROBE_LOOPS) -> float:
    """µs of a fixed pure-Python loop on the current CPU, best of three: how fast it runs
    the interpreter right now."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(loops):
            total += i & 7
        best = min(best, time.perf_counter() - start)
    return best * 1e6
