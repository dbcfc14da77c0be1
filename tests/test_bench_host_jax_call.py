"""bench/host_jax_call.py on the fake driver: every piece of the handler's call is timed
and the handler's own plan cache is left as it was."""

from __future__ import annotations

import json
import sys

from support import REPO

sys.path.insert(0, str(REPO / "bench"))
import host_jax_call  # noqa: E402

from nvfp4_aot.jax import handler  # noqa: E402


def test_times_every_piece_and_restores_the_plan_cache(tmp_path, capsys):
    before = dict(handler._plans)
    out = tmp_path / "host.json"
    assert host_jax_call.main(["--rounds", "1", "--reps", "8", "--json", str(out)]) == 0
    assert handler._plans == before
    times = json.loads(out.read_text())["us"]
    assert list(times) == [
        "read_frame", "stream query", "device query", "plan key", "handler call",
        "string_at read",
    ]  # fmt: skip
    assert all(us > 0 for us in times.values())
    # the whole call includes its pieces
    assert times["handler call"] > times["read_frame"] + times["plan key"]
    printed = capsys.readouterr().out
    assert all(name in printed for name in times)
