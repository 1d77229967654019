"""Each exercise's checker on live ranks: the shipped solution passes, each classic mistake
is rejected with its own name, and a failing attempt's record saves, loads and draws."""
from __future__ import annotations

import subprocess
import sys
import types

import matplotlib
import pytest

import exercise_mistakes as wrong
from dpviz import Cluster, load, save
from dpviz.lessons.exercises import (
    check_accumulation, check_buckets, check_hook, check_ring, check_zero1, report,
)
from dpviz.lessons.exercises.core import choose, is_starter, portable
from dpviz.lessons.exercises.show import plot_check
from dpviz.lessons.exercises.records import FORCED, NOTHING, NO_FUNCTION, STARTER, Verdict, YOURS

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def cluster3():
    """3 ranks: the unchunked ring's (N−1)·S = 2S differs from a ring's 2(N−1)/N·S = 4S/3."""
    with Cluster(3) as cluster:
        yield cluster


def as_notebook_function(fn):
    """`fn` as if typed in a notebook cell: not importable, so it travels as source."""
    copy = types.FunctionType(fn.__code__, {}, fn.__name__)
    copy.__module__ = "__main__"
    return copy


def rejected(check, mistake: str, *words: str):
    assert not check.verdict.passed
    assert check.verdict.mistake == mistake, check.verdict.text()
    for word in words:
        assert word in check.verdict.message
    assert check.verdict.hint
    return check


def test_the_shipped_solutions_pass(cluster3):
    for check in (check_ring(None, cluster=cluster3), check_hook(None, cluster=cluster3), check_buckets(None, cluster=cluster3),
                  check_accumulation(None, cluster=cluster3), check_zero1(None, cluster=cluster3)):
        assert check.verdict.passed, check.verdict.text()
        assert check.verdict.checked == NO_FUNCTION
        assert check.verdict.text().startswith(f"{check.verdict.exercise}: NOT CHECKED — no function given")


def test_ring_names_the_tutorials_unchunked_ring(cluster3, tmp_path):
    check = rejected(check_ring(as_notebook_function(wrong.unchunked_ring), cluster=cluster3), "unchunked_ring",
                     "(N−1)·S = 72 B", "PyTorch tutorial", "2(N−1)/N·S = 48 B")
    assert check.yours.bytes_sent_per_rank == (72, 72, 72)        # measured: 2 steps × 36 B
    assert check.reference.bytes_sent_per_rank == (48, 48, 48)
    assert check.yours.frames[-1] == check.reference.frames[-1]   # the sum itself is right
    assert load(save(check, tmp_path / "ring.json")) == check
    assert plot_check(load(tmp_path / "ring.json")) is not None


def test_ring_wrong_sum_is_drawn_at_the_first_differing_step(cluster3):
    check = rejected(check_ring(wrong.ring_adding_in_all_gather, cluster=cluster3), "wrong_sum", "wrong result")
    n = 3
    assert check.first_diff == n  # reduce-scatter (steps 1, 2) is right; step 3 adds instead of copying
    assert check.yours.frames[n - 1] == check.reference.frames[n - 1]
    # provenance on the live ranks: some cell of frame 3 counts a rank's input twice
    assert any(len(h) != len(set(h)) for rank in check.yours.holds[n] for h in rank)
    assert report(check) is not None


def test_hook_names_picotron_39_and_a_missing_divide(cluster3):
    rejected(check_hook(wrong.picotron_39, cluster=cluster3), "averaged_parameter", "picotron issue #39")
    check = rejected(check_hook(wrong.sum_without_divide, cluster=cluster3), "missing_divide", "3×")
    # the sum is 3 × the mean; float32 rounding of the sums and norms moves the ratio by a few
    # ε·3 ≈ 1e-6 at most, so 1e-3 tells the factor 3 from 1 (or 2) without testing rounding
    assert all(abs(r - 3) < 1e-3 for r in check.yours.norm_ratio)


def test_buckets_name_off_by_one_order_and_first_cap(cluster3):
    check = rejected(check_buckets(wrong.close_after_cap, cluster=cluster3), "off_by_one", "exactly its cap")
    assert check.yours.model == "MLP 24×256, cap = one layer exactly"
    rejected(check_buckets(wrong.definition_order, cluster=cluster3), "forward_order", "definition order")
    rejected(check_buckets(wrong.no_first_bucket_cap, cluster=cluster3), "no_first_cap", "1 MiB")
    rejected(check_buckets(wrong.first_cap_on_explicit_caps, cluster=cluster3), "first_cap_always", "explicit")
    rejected(check_buckets(wrong.forgets_the_head, cluster=cluster3), "not_a_partition", "exactly one bucket")
    assert plot_check(check) is not None


def test_accumulation_names_backward_only_no_sync_and_missing_1_over_k(cluster3):
    check = rejected(check_accumulation(wrong.no_sync_backward_only, cluster=cluster3), "backward_only",
                     "covers backward only")
    n_buckets = check.reference.all_reduces_per_micro[-1]
    assert n_buckets > 1 and check.yours.all_reduces_per_micro == (n_buckets,) * 4
    assert check.reference.all_reduces_per_micro == (0, 0, 0, n_buckets)
    check = rejected(check_accumulation(wrong.accumulate_without_1_over_k, cluster=cluster3), "missing_1_over_K", "4.0000×")
    rejected(check_accumulation(wrong.accumulate_without_no_sync, cluster=cluster3), "no_no_sync")
    assert plot_check(check) is not None


def test_zero1_names_a_missing_all_gather_and_unsharded_state(cluster3):
    check = rejected(check_zero1(wrong.zero1_without_all_gather, cluster=cluster3), "no_all_gather",
                     "never moved")
    assert check.yours.all_gathers == (0, 0, 0)
    check = rejected(check_zero1(wrong.adam_on_every_rank, cluster=cluster3), "unsharded_state", "8Ψ = 8160 B")
    assert plot_check(check) is not None


def test_zero1_hand_written_adam_passes_within_the_float32_tolerance(cluster3):
    check = check_zero1(wrong.zero1_by_hand, cluster=cluster3)
    assert check.verdict.passed, check.verdict.text()
    assert check.yours.state_bytes == (2720, 2720, 2720)     # m and v of 340 parameters, float32
    assert 0 < max(max(d) for d in check.yours.abs_diff) < check.yours.tolerance


def test_starter_and_environment_pick_the_shipped_solution(monkeypatch):
    def starter(buf, comm):
        """Your code here."""
        raise NotImplementedError

    assert is_starter(starter) and not is_starter(wrong.unchunked_ring)
    assert choose(starter, "ring_all_reduce")[1] == STARTER
    assert choose(wrong.unchunked_ring, "ring_all_reduce")[1] == YOURS
    monkeypatch.setenv("DPVIZ_SOLUTIONS", "1")
    assert choose(wrong.unchunked_ring, "ring_all_reduce")[1] == FORCED
    assert choose(starter, "ring_all_reduce")[1] == STARTER     # CI: the learner still reads "starter"
    assert choose(starter, "no_such_exercise") == (None, NOTHING)   # solutions removed
    assert portable(as_notebook_function(wrong.unchunked_ring))[0] == "source"


def test_an_untouched_starter_never_reads_pass():
    """The shipped solution passing in place of a starter says NOT CHECKED, never PASS."""
    ran = Verdict("ring all-reduce", True, STARTER, message="same sums as the reference")
    assert ran.status == "NOT CHECKED" and "PASS" not in ran.text()
    assert ran.text().splitlines()[0] == "ring all-reduce: NOT CHECKED — still the starter (the shipped solution passes)"
    assert Verdict("x", True, YOURS).text() == "x (your code): PASS"
    assert Verdict("x", False, YOURS).status == "NOT YET"
    assert "PASS" not in Verdict("x", True, FORCED).text()


def test_a_crash_in_the_learners_packing_quotes_their_line_and_the_call(cluster3):
    """The `None * 2**20` crash: the exception, the learner's line, and what the call was given
    (bucket_cap_mb=None), not a guess about param_bytes."""
    check = rejected(check_buckets(as_notebook_function(wrong.packing_none_cap), cluster=cluster3), "error",
                     "TypeError", "at line 3 of your packing_none_cap: limit = bucket_cap_mb * 2**20")
    assert "bucket_cap_mb=None" in check.verdict.hint and "param_bytes is a list" not in check.verdict.hint


def test_records_and_figures_load_without_torch():
    subjects = ("collectives.record", "collectives.plots", "averaging.records", "averaging.plots",
                "buckets.records", "buckets.plots", "accumulation.records", "accumulation.plots",
                "zero.records", "zero.plots")
    code = ("import sys; import dpviz.lessons.exercises.records, dpviz.lessons.exercises.show; "
            + "; ".join(f"import dpviz.lessons.{m}" for m in subjects)
            + "; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_crashing_or_hanging_attempt_names_the_rank_and_the_fix(cluster3, monkeypatch):
    check = rejected(check_ring(as_notebook_function(wrong.ring_that_raises), cluster=cluster3), "error", "NameError",
                     "raised NameError", "at line 2 of your ring_that_raises: return buf.numel() / undefined_name")
    assert "import anything else inside the function" in check.verdict.hint
    assert check.yours is None and report(check) is None
    monkeypatch.setattr("dpviz.lessons.exercises.core.EXERCISE_TIMEOUT_S", 3.0)
    rejected(check_ring(wrong.ring_receiving_first, cluster=cluster3), "hang", "rank(s) 0, 1, 2", "within 3 s")


def test_the_other_mistakes_get_their_own_messages(cluster3):
    """Beyond the classic ones: each check stops at the first thing wrong and names it."""
    rejected(check_ring(wrong.ring_sending_twice, cluster=cluster3), "steps", "a ring takes 2(N−1) = 4")
    rejected(check_hook(wrong.hook_keeping_the_local_gradient, cluster=cluster3), "no_communication", "nothing went")
    rejected(check_accumulation(wrong.accumulate_never_syncing, cluster=cluster3), "never_synced", "never averaged")
    rejected(check_zero1(wrong.zero1_with_lr_1e_2, cluster=cluster3), "wrong_update", "differs from plain Adam")


def test_a_verdict_wraps_at_spaces_never_mid_word():
    """Issue 30: a notebook's output broke a long verdict line mid-word."""
    message = "MLP 24×256, cap = one layer exactly: bucket 3 held exactly its cap (263168 B) and DDP closed it; yours took one more gradient"
    text = Verdict("bucket assignment", False, YOURS, "off_by_one", message, "close a bucket as soon as it holds at least the cap").text()
    words = message.split()
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.split() == ["bucket", "assignment", "(your", "code):", "NOT", "YET"] + words + \
        ["hint:", "close", "a", "bucket", "as", "soon", "as", "it", "holds", "at", "least", "the", "cap"]
