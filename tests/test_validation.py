"""Problem-size validation (nvfp4_aot.validation)."""

from __future__ import annotations

import numpy as np
import pytest

from nvfp4_aot import validation
from nvfp4_aot.errors import InvalidProblemError


@pytest.mark.parametrize(
    "sizes, message",
    [([], r"problem_sizes is empty"),
     ([(128, 128)], r"group 0: problem size must have 3 \(m, n, k\) or 4 \(m, n, k, l\) entries, got 2"),
     ([(128, 128, 256), (-1, 128, 256)], r"group 1: m must be >= 0 \(an empty group\), got -1"),
     ([(128, 0, 256)], r"group 0: n must be >= 1, got 0"),
     ([(128, -1, 256)], r"group 0: n must be >= 1, got -1"),
     ([(128, 128, 256, 2)], r"group 0: l must be 1 .*got 2"),
     ([(128, 128, 48)], r"group 0: k must be a multiple of 32 .*got 48"),
     ([(128, 100, 256)], r"group 0: n must be a multiple of 32 .*got 100"),
     ([(128, 128, 1.5)], r"group 0: problem size must be integers"),
     ([(1 << 20, 4096, 4096)], r"group 0: m \* k must be < 2\*\*31 .*got 4294967296")],
)  # fmt: skip
def test_problem_size_validation(sizes, message):
    with pytest.raises(InvalidProblemError, match=message):
        validation.problem_sizes(sizes)


def test_problem_sizes_accept_numpy():
    sizes = np.array([[128, 256, 512, 1]], dtype=np.int64)
    assert validation.problem_sizes(sizes) == ((128, 256, 512, 1),)


def test_empty_groups_are_valid():
    assert validation.problem_sizes([(0, 128, 256), (64, 128, 256)]) == (
        (0, 128, 256, 1), (64, 128, 256, 1))  # fmt: skip
