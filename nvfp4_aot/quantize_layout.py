"""Where the activation quantizer's words, rows and outputs lie: pure arithmetic, no driver.

The quantizer kernel (:mod:`nvfp4_aot.kernels.nvfp4_quantize`) reads two arrays of int64
words, as the MoE routing kernel does: the *plan* words (uploaded once: form, sizes,
strides) and the *run* words (per run: the device addresses of the operands). Its launch
ABI stays three inputs (``plan``, ``run``, ``num_ctas``) for every form and shape.

Work is cut into *units*: one token row times one *segment* of ``segment_blocks`` (128,
64 or 32) 16-element blocks of it (a warp's work: four, two or one blocks per lane): its
input row, its output row and its blocked-scale row. The plan's words bound them by the worst case,
``Q_UNITS`` = the scale rows x segments (an MoE run has only its routing's token rows;
one whose clamped counts reach past the plan's scale rows writes nothing there). The
*padding* scale rows (a contiguous expert's rows past its tokens to the end of its 128-row
atom; plain: past T; the masked form has none) are zeroed apart from the units, a warp a
512-byte atom. So a grid fixed at plan creation serves every routing, and nothing outside
the outputs the plan checked is ever written. The layout of the words has one home: this module.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from .blocked import BLOCK_COLS, BLOCK_ROWS, SF_VEC_SIZE
from .errors import InvalidProblemError
from .intmath import ceil_div, round_up
from .launch_layout import ALIGN, SlotRing
from .manifest import Variant
from .moe_layout import contiguous_scale_rows
from .packing import launch_grid

FORMS = ("plain", "contiguous", "masked")
FORM_PLAIN, FORM_CONTIGUOUS, FORM_MASKED = range(3)
DTYPES = ("bfloat16", "float16")

MAX_EXPERTS = 1024  # the kernel's shared-memory table of expert segments
SEGMENT_BLOCKS = 128  # the widest unit: 32 lanes x 4 blocks (2048 elements)
SEGMENT_CHOICES = (128, 64, 32)  # a plan's unit widths: 4, 2 or 1 blocks a lane
INT32_MAX = 2**31 - 1

# plan words (int64)
Q_FORM, Q_EXPERTS, Q_CAPACITY, Q_INPUT_ROWS, Q_K, Q_BLOCKS, Q_BLOCKS_PADDED = range(7)
Q_SEGMENTS, Q_UNITS, Q_ROW_STRIDE_BYTES, Q_OUT_ROW_BYTES, Q_COL_TILES = range(7, 12)
Q_EXPERT_SCALE_ROWS, Q_FP16, Q_SEGMENT_BLOCKS = 12, 13, 14
Q_WORDS = 16
# run words (int64): device addresses
R_X, R_OUT, R_SCALES, R_GLOBAL_SCALE, R_ROUTING, R_INDEX = range(6)
R_WORDS = 8
RUN_FIELDS = ("x", "out", "scales", "global_scale", "routing", "index")  # in R_* order


@dataclass(frozen=True)
class QuantizeProblem:
    """The plan-time facts of one quantizer plan (checked by :meth:`check`).

    ``rows``: input rows readable (plain: T; contiguous: the token rows the index array
    picks from, T when there is no index; masked: E * max_m). ``capacity``: output rows
    (plain: T; contiguous: the most routed rows; masked: max_m per expert).
    ``row_stride``: input elements between rows (>= k). ``segment_blocks``: the blocks
    of a unit (a warp's work: a row segment), one of SEGMENT_CHOICES
    (:func:`unit_blocks` picks it for the plan).
    """

    form: str
    rows: int
    k: int
    experts: int
    capacity: int
    dtype: str
    row_stride: int
    segment_blocks: int = SEGMENT_BLOCKS

    def check(self) -> None:
        """Raise InvalidProblemError naming the first bad field."""
        if self.form not in FORMS:
            raise InvalidProblemError(f"form must be one of {FORMS}, got {self.form!r}")
        if self.dtype not in DTYPES:
            raise InvalidProblemError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        for name in ("rows", "k", "experts", "capacity", "row_stride"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidProblemError(f"{name} must be an int >= 1, got {value!r}")
        if self.k % SF_VEC_SIZE:
            raise InvalidProblemError(f"k must be a multiple of {SF_VEC_SIZE}, got {self.k}")
        if self.row_stride < self.k or self.row_stride % 8:
            raise InvalidProblemError(
                f"row_stride must be >= k = {self.k} and a multiple of 8 elements (16-byte "
                f"aligned rows for 128-bit loads), got {self.row_stride}"
            )
        if self.segment_blocks not in SEGMENT_CHOICES:
            raise InvalidProblemError(
                f"segment_blocks must be one of {SEGMENT_CHOICES}, got {self.segment_blocks!r}"
            )
        if self.experts > MAX_EXPERTS:
            raise InvalidProblemError(
                f"experts must be <= {MAX_EXPERTS} (the kernel's table), got {self.experts}"
            )
        if self.form == "plain" and self.experts != 1:
            raise InvalidProblemError(f"the plain form has one expert, got experts={self.experts}")
        if self.form == "plain" and self.capacity != self.rows:
            raise InvalidProblemError(
                f"the plain form writes its rows: capacity must equal rows = {self.rows}, "
                f"got {self.capacity}"
            )
        if self.form == "masked" and self.rows != self.experts * self.capacity:
            raise InvalidProblemError(
                f"the masked form reads (E, max_m, k): rows must be experts * capacity = "
                f"{self.experts * self.capacity}, got {self.rows}"
            )
        if (
            self.form == "contiguous"
            and self.experts * round_up(self.capacity, BLOCK_ROWS) > INT32_MAX
        ):
            raise InvalidProblemError(
                f"experts x round_up(capacity, 128) = "
                f"{self.experts * round_up(self.capacity, BLOCK_ROWS)} must fit int32 (the "
                "kernel's sums of clamped expert segments)"
            )
        sizes = {
            "input elements": (self.rows - 1) * self.row_stride + self.k,
            "scale rows x segments": self.scale_rows * self.segments,
            "output rows": self.output_rows,
        }
        for what, value in sizes.items():
            if value > INT32_MAX:
                raise InvalidProblemError(f"{what} ({value}) do not fit int32; split the tensor")

    @property
    def blocks(self) -> int:
        return self.k // SF_VEC_SIZE

    @property
    def blocks_padded(self) -> int:
        return round_up(self.blocks, BLOCK_COLS)

    @property
    def segments(self) -> int:
        return ceil_div(self.blocks_padded, self.segment_blocks)

    @property
    def output_rows(self) -> int:
        return self.experts * self.capacity if self.form == "masked" else self.capacity

    @property
    def expert_scale_rows(self) -> int:
        """Masked: blocked-scale rows per expert (round_up(max_m, 128)); else 0."""
        return round_up(self.capacity, BLOCK_ROWS) if self.form == "masked" else 0

    @property
    def scale_rows(self) -> int:
        """Rows of the blocked scale buffer (a multiple of 128)."""
        if self.form == "plain":
            return round_up(self.rows, BLOCK_ROWS)
        if self.form == "contiguous":
            return contiguous_scale_rows(self.capacity, self.experts)
        return self.experts * self.expert_scale_rows

    def operand_bytes(self, has_index: bool = True) -> dict[str, int]:
        """Bytes each operand field spans (what a run may read or write)."""
        contiguous = self.form == "contiguous"
        return {
            "x": 2 * ((self.rows - 1) * self.row_stride + self.k),
            "out": self.output_rows * self.k // 2,
            "scales": self.scale_rows * self.blocks_padded,
            "global_scale": 4,
            "routing": {"plain": 0, "contiguous": 4 * (self.experts + 1)}.get(
                self.form, 4 * self.experts
            ),
            "index": 4 * self.capacity if contiguous and has_index else 0,
        }

    def plan_words(self) -> list[int]:
        words = [0] * Q_WORDS
        words[Q_FORM] = FORMS.index(self.form)
        words[Q_EXPERTS] = self.experts
        words[Q_CAPACITY] = self.capacity
        words[Q_INPUT_ROWS] = self.rows
        words[Q_K] = self.k
        words[Q_BLOCKS] = self.blocks
        words[Q_BLOCKS_PADDED] = self.blocks_padded
        words[Q_SEGMENTS] = self.segments
        words[Q_UNITS] = self.scale_rows * self.segments
        words[Q_ROW_STRIDE_BYTES] = 2 * self.row_stride
        words[Q_OUT_ROW_BYTES] = self.k // 2
        words[Q_COL_TILES] = self.blocks_padded // BLOCK_COLS
        words[Q_EXPERT_SCALE_ROWS] = self.expert_scale_rows
        words[Q_FP16] = DTYPES.index(self.dtype)
        words[Q_SEGMENT_BLOCKS] = self.segment_blocks
        return words


def unit_blocks(problem: QuantizeProblem, warps: int) -> int:
    """The widest unit of SEGMENT_CHOICES whose units (at the plan's most token rows)
    still give half of the grid's ``warps`` one: a warp's unit is a chain of dependent
    instructions (~750 for 128 blocks), so where most warps would have none (decode
    sizes) narrower units spread a row over more warps; where they all have work, the
    widest units' four blocks a lane keep two blocks' math side by side."""
    for blocks in SEGMENT_CHOICES:
        if 2 * problem.output_rows * ceil_div(problem.blocks_padded, blocks) >= warps:
            return blocks
    return SEGMENT_CHOICES[-1]


@dataclass(frozen=True)
class QuantizeLaunch:
    """The one launch of a run: ``num_ctas`` CTAs striding over the units."""

    num_ctas: int
    grid: tuple[int, int, int]


@dataclass(frozen=True)
class QuantizeLayout(SlotRing):
    """The launch of one quantizer plan and the byte layout of its buffer::

    [plan words]  [slot 0] ... [slot R-1] [capture slots]   run words, one set a slot
    """

    problem: QuantizeProblem
    launch: QuantizeLaunch
    variant: Variant
    ring_slots: int
    capture_slots: int
    ring_offset: int
    slot_bytes: int
    device_bytes: int

    @classmethod
    def build(
        cls, problem: QuantizeProblem, variant: Variant, sm_count: int, ring_slots: int,
        capture_slots: int = 8, segment_blocks: int | None = None,
    ) -> QuantizeLayout:  # fmt: skip
        """``segment_blocks``: the unit width (default: :func:`unit_blocks`'s for the
        largest grid); the layout's ``problem`` carries it."""
        problem.check()
        warps = variant.block[0] // 32
        max_ctas = variant.blocks_per_sm * sm_count
        if segment_blocks is None:
            segment_blocks = unit_blocks(problem, max_ctas * warps)
        problem = replace(problem, segment_blocks=segment_blocks)
        problem.check()
        units = problem.scale_rows * problem.segments
        num_ctas = max(1, min(ceil_div(units, warps), max_ctas))
        launch = QuantizeLaunch(num_ctas, launch_grid(variant, {"num_ctas": num_ctas}))
        ring_offset = round_up(8 * Q_WORDS, ALIGN)
        slot_bytes = round_up(8 * R_WORDS, ALIGN)
        return cls(
            problem=problem, launch=launch, variant=variant, ring_slots=ring_slots,
            capture_slots=capture_slots, ring_offset=ring_offset, slot_bytes=slot_bytes,
            device_bytes=ring_offset + (ring_slots + capture_slots) * slot_bytes,
        )  # fmt: skip

    # the launcher's protocol ------------------------------------------------------------

    @property
    def launches(self) -> tuple[QuantizeLaunch]:
        return (self.launch,)

    def zero_once(self) -> list[tuple[int, int]]:
        return []

    def static_tables(self, base: int) -> bytearray:
        """The plan words (the same for eager runs and graph replays: no addresses)."""
        image = bytearray(self.ring_offset)
        struct.pack_into(f"<{Q_WORDS}q", image, 0, *self.problem.plan_words())
        return image

    def kernel_inputs(self, launch, base: int, slot: int) -> dict[str, int]:
        return {"plan": base, "run": base + self.slot_offset(slot), "num_ctas": launch.num_ctas}

    def run_table(self, pointers) -> bytes:
        """A slot's bytes for the device addresses in RUN_FIELDS order (0: absent)."""
        return struct.pack(
            f"<{self.slot_bytes // 8}Q", *pointers, *[0] * (self.slot_bytes // 8 - len(pointers))
        )
