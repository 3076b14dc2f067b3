"""The standalone dev cluster's collector: a full collection's survivors are not walked again."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_after_a_full_collection_its_survivors_leave_the_generations_the_next_one_walks() -> None:
    # in a process of its own: the setting is process-wide, and the test runner must keep CPython's
    script = textwrap.dedent(
        """
        import gc
        from kruntimes.devcluster.gcpauses import shorten_pauses

        store = [{"metadata": {"name": f"run-{i}"}, "spec": {"runtime": "python"}} for i in range(50_000)]
        gc.collect()
        before = len(gc.get_objects(generation=2))
        assert shorten_pauses() and not shorten_pauses()  # installed once
        gc.collect()
        frozen = gc.get_freeze_count()
        after = len(gc.get_objects(generation=2))
        store.append({"metadata": {"name": "late"}})
        print(before, frozen, after)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    before, frozen, after = (int(n) for n in done.stdout.split())
    assert before > 50_000  # the store's dicts were in the oldest generation, walked by every full collection
    assert frozen >= before  # now frozen
    assert after < 1_000  # the next full collection walks what arrived since, not the store


def test_the_standalone_server_hands_the_interpreter_between_threads_ten_times_as_often() -> None:
    script = "import sys; from kruntimes.devcluster.gcpauses import quick_turns; quick_turns(); print(sys.getswitchinterval())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert abs(float(done.stdout) - 0.0005) < 1e-9  # CPython: 0.005
