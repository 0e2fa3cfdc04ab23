"""The statistics of a series of checkpoints, against independent references, on summaries built
here (no server): Holm's adjusted p-values against the step-down procedure run as its paper states
it, the simultaneous intervals against Newcombe's method written out again with scipy's Wilson
limits at level 1 - 0.05/m, the McNemar p against scipy's binomial test, the split (deterministic,
recorded, disjoint, independent of the order given) and the honest choice, and every refusal.

Expected numbers come from scipy, from hand computations written in the test, or from the
definitions restated here, never from ``scheduler.series`` itself.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable

import pytest

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.differences import PairedCounts, paired_difference
from scheduler.series import SeriesError, bonferroni_z, check_request, holm, select, selection_size, series, split

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
pytestmark = pytest.mark.timeout(60)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CELLS = [("open_drawer", "clean"), ("open_drawer", "randomized"), ("stack_blocks", "clean"), ("pour", "clean")]
EPISODES = 20
Outcome = Callable[[int, int], bool]  # (manifest position, episode index) -> success


def _summary(submission_id: str, succeed: Outcome, checkpoint: str = "", cells=CELLS, done: int = EPISODES):
    """A submission of the CELLS manifests (hash "h<k>"), the first ``done`` episodes of each run."""
    summary = pb.GetSummaryResponse(submission_id=submission_id, checkpoint=checkpoint or f"sha-{submission_id}")
    for k, (task, setting) in enumerate(cells):
        m = pb.ManifestSummary(manifest_hash=f"h{k}", benchmark="synthetic", task=task, setting=setting)
        for i in range(done):
            (m.succeeded_episodes if succeed(k, i) else m.failed_episodes).append(i)
        m.episodes_planned, m.episodes_completed, m.episodes_succeeded = EPISODES, done, len(m.succeeded_episodes)
        summary.manifests.append(m)
    summary.episodes_planned = EPISODES * len(cells)
    summary.episodes_completed = done * len(cells)
    summary.episodes_succeeded = sum(m.episodes_succeeded for m in summary.manifests)
    summary.complete = done == EPISODES
    return summary


def _holm_rejects(p_values: list[float], alpha: float) -> set[int]:
    """Holm (1979) as the paper states the procedure: test the smallest p at alpha/m, the next at
    alpha/(m-1), ..., and stop at the first that is not rejected."""
    m = len(p_values)
    rejected: set[int] = set()
    for step, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        if p_values[index] > alpha / (m - step):
            break
        rejected.add(index)
    return rejected


def test_holm_adjusts_as_computed_by_hand():
    # sorted: 0.005 (x4), 0.01 (x3), 0.03 (x2), 0.04 (x1) -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([0.02]) == pytest.approx([0.02])
    # A comparison without a test counts in m as a p of 1 and gets no adjusted p.
    assert holm([0.01, None, 0.02]) == pytest.approx([0.03, None, 0.04])


def test_holm_rejects_exactly_what_the_step_down_procedure_rejects():
    rng = random.Random(11)
    for _ in range(300):
        p_values = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        adjusted = holm(p_values)
        for alpha in (0.001, 0.01, 0.05, 0.1, 0.2):
            assert {i for i, p in enumerate(adjusted) if p is not None and p <= alpha} == _holm_rejects(p_values, alpha)
        assert all(p is not None and p_values[i] <= p <= 1.0 for i, p in enumerate(adjusted))


@pytest.mark.parametrize("m", [1, 2, 3, 10])
def test_bonferroni_quantile_is_scipys(m):
    assert bonferroni_z(m) == pytest.approx(stats.norm.ppf(1 - 0.05 / (2 * m)), rel=1e-12)
    assert bonferroni_z(1) == pytest.approx(1.959963984540054, rel=1e-12)


def _newcombe_paired(a: int, b: int, c: int, d: int, level: float) -> tuple[float, float]:
    """Newcombe (1998) method 10 for the table [[a, b], [c, d]] (rows A success/failure, columns B
    success/failure) as B's rate minus A's at ``level``, with scipy's Wilson limits at that level."""
    n = a + b + c + d
    pa, pb_ = (a + b) / n, (a + c) / n
    ci_a = stats.binomtest(a + b, n).proportion_ci(confidence_level=level, method="wilson")
    ci_b = stats.binomtest(a + c, n).proportion_ci(confidence_level=level, method="wilson")
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins else 0.0
    dl, du = pb_ - ci_b.low, ci_a.high - pa
    el, eu = ci_b.high - pb_, pa - ci_a.low
    low = (pb_ - pa) - math.sqrt(dl**2 - 2 * phi * dl * du + du**2)
    high = (pb_ - pa) + math.sqrt(el**2 - 2 * phi * el * eu + eu**2)
    return max(-1.0, low), min(1.0, high)


@pytest.mark.parametrize("m", [2, 5])
def test_paired_interval_at_a_simultaneous_level_against_the_reference(m):
    rng = random.Random(m)
    level = 1 - 0.05 / m
    for _ in range(100):
        a, b, c, d = (rng.randint(0, 40) for _ in range(4))
        if a + b + c + d == 0:
            continue
        wide = paired_difference(PairedCounts(a, b, c, d), bonferroni_z(m))
        usual = paired_difference(PairedCounts(a, b, c, d))
        assert wide is not None and usual is not None
        assert wide.interval == pytest.approx(_newcombe_paired(a, b, c, d, level), abs=1e-9)
        assert wide.interval.low <= usual.interval.low and usual.interval.high <= wide.interval.high
        assert wide.p_value == usual.p_value  # the test does not depend on the level


# Baseline 6/20 per manifest; "more" +4 on every manifest; "mixed" +7 on manifests 0-1, -2 on 2-3;
# "same" trades episode 0 for episode 6 on every manifest.
RUNS: dict[str, Outcome] = {
    "base": lambda k, i: i < 6,
    "more": lambda k, i: i < 10,
    "mixed": lambda k, i: i < 13 if k < 2 else i < 4,
    "same": lambda k, i: 0 < i < 7,
}


def _pairs_by_hand(a: Outcome, b: Outcome) -> tuple[int, int, int, int]:
    cells = [(a(k, i), b(k, i)) for k in range(len(CELLS)) for i in range(EPISODES)]
    return (
        cells.count((True, True)),
        cells.count((True, False)),
        cells.count((False, True)),
        cells.count((False, False)),
    )


def test_the_series_pairs_each_with_the_baseline_and_corrects_for_the_family():
    found = series([_summary(name, succeed) for name, succeed in RUNS.items()])
    assert found.baseline == 0 and found.comparisons == 3
    assert found.interval_level == pytest.approx(1 - 0.05 / 3)
    base = found.points[0]
    assert base.comparison is None and base.difference is None and base.p_holm is None
    assert [p.counts.succeeded for p in found.points] == [24, 40, 34, 24]
    for point in found.points:
        interval = stats.binomtest(point.counts.succeeded, point.counts.completed).proportion_ci(method="wilson")
        assert point.interval == pytest.approx((interval.low, interval.high), abs=1e-12)
    raw = []
    for name, point in zip(list(RUNS)[1:], found.points[1:], strict=True):
        both, a_only, b_only, neither = _pairs_by_hand(RUNS["base"], RUNS[name])
        assert point.pairs == PairedCounts(both, a_only, b_only, neither)
        assert point.difference is not None
        assert point.difference.estimate == pytest.approx((b_only - a_only) / 80, rel=1e-12)
        assert point.difference.interval == pytest.approx(
            _newcombe_paired(both, a_only, b_only, neither, 1 - 0.05 / 3), abs=1e-9
        )
        raw.append(stats.binomtest(a_only, a_only + b_only).pvalue)
        assert point.difference.p_value == pytest.approx(raw[-1], rel=1e-9)
    # more: 0 vs 16 discordant; mixed: 4 vs 14; same: 4 vs 4. Holm by hand over the three.
    order = sorted(range(3), key=lambda i: raw[i])
    expected = [0.0] * 3
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (3 - step) * raw[index]))
        expected[index] = running
    assert [p.p_holm for p in found.points[1:]] == pytest.approx(expected, rel=1e-9)
    assert [p.significant for p in found.points[1:]] == [True, False, False]
    assert raw[1] < 0.05, "mixed alone would pass at 5%; Holm's correction for 3 comparisons does not"


def test_another_baseline_and_incomplete_submissions_when_asked():
    runs = [_summary(name, succeed) for name, succeed in RUNS.items()]
    found = series(runs, baseline="more")
    assert found.baseline == 1 and found.points[1].difference is None
    assert found.points[0].difference is not None and found.points[0].difference.estimate == pytest.approx(-0.2)
    partial = _summary("partial", RUNS["more"], done=10)
    with pytest.raises(SeriesError, match=r"^complete: partial incomplete.*--allow-incomplete"):
        series([runs[0], partial])
    marked = series([runs[0], partial], allow_incomplete=True)
    assert marked.points[1].pairs is not None and marked.points[1].pairs.pairs == 40  # episodes both completed
    assert marked.points[1].counts.completed == 40 and marked.points[1].counts.planned == 80


def test_refusals_name_the_field():
    base, more = _summary("base", RUNS["base"]), _summary("more", RUNS["more"])
    with pytest.raises(SeriesError, match=r"^submissions: a series needs at least 2 submissions, got 1"):
        series([base])
    with pytest.raises(SeriesError, match=r"^submissions: base given more than once"):
        series([base, more, base])
    with pytest.raises(SeriesError, match=r"^baseline: nope is not one of"):
        series([base, more], baseline="nope")
    with pytest.raises(SeriesError, match=r"^select_fraction: 1.0 is outside \(0, 1\)"):
        check_request(["a", "b"], None, 1.0)
    other = _summary("other", RUNS["more"], cells=CELLS[:3])
    with pytest.raises(SeriesError, match=r"^manifests: other \(only there: 0, missing: 1\) evaluate different"):
        series([base, other, more])


def _sequential(summary: pb.GetSummaryResponse, stopped_at: float, verdict: str = "") -> pb.GetSummaryResponse:
    summary.sequential.CopyFrom(pb.SequentialState(stopped_at=stopped_at, verdict=verdict))
    return summary


def test_sequential_submissions_without_every_result_are_refused_even_when_incomplete_ones_are_allowed():
    base = _summary("base", RUNS["base"])
    stopped = _sequential(_summary("stopped", RUNS["more"], done=10), 1.7e9, "at_least")
    running = _sequential(_summary("running", RUNS["more"], done=10), 0.0)
    for refused, standing in ((stopped, "stopped early by its sequential rule (at_least)"), (running, "still running")):
        with pytest.raises(SeriesError, match=r"^sequential: ") as error:
            series([base, refused], allow_incomplete=True)
        assert standing in str(error.value) and "not a fixed-size sample" in str(error.value)
    # Every planned episode's result is in: a fixed sample like any other, stopped or not.
    whole = _sequential(_summary("whole", RUNS["more"]), 1.7e9, "at_least")
    assert series([base, whole]).points[1].difference is not None


def _manifests(n: int) -> list[pb.ManifestSummary]:
    return [
        pb.ManifestSummary(manifest_hash=hashlib.sha256(str(k).encode()).hexdigest(), task=f"t{k}") for k in range(n)
    ]


def test_the_split_is_deterministic_disjoint_recorded_and_independent_of_the_order_given():
    manifests = _manifests(20)
    first = split(manifests, seed=7, fraction=0.3)
    assert (first.seed, first.fraction) == (7, 0.3)
    chosen = {m.manifest_hash for m in first.selection}
    held = {m.manifest_hash for m in first.held_out}
    assert len(chosen) == 6 and len(held) == 14 and chosen.isdisjoint(held)
    assert chosen | held == {m.manifest_hash for m in manifests}
    # The seeded order restated: the 6 smallest sha256(seed, hash) go to the selection set.
    ranked = sorted(manifests, key=lambda m: hashlib.sha256(f"7\n{m.manifest_hash}".encode()).hexdigest())
    assert chosen == {m.manifest_hash for m in ranked[:6]}
    shuffled = list(manifests)
    random.Random(3).shuffle(shuffled)
    again = split(shuffled, seed=7, fraction=0.3)
    assert {m.manifest_hash for m in again.selection} == chosen
    # Each side keeps the order the manifests came in.
    assert [m.manifest_hash for m in first.held_out] == [m.manifest_hash for m in manifests if m.manifest_hash in held]
    assert len({frozenset(m.manifest_hash for m in split(manifests, s, 0.3).selection) for s in range(10)}) > 5


def test_the_selection_size_rounds_half_up_and_an_empty_side_is_refused():
    assert [selection_size(4, f) for f in (0.1, 0.125, 0.25, 0.5, 0.875, 0.9)] == [0, 1, 1, 2, 4, 4]
    with pytest.raises(SeriesError, match=r"^select_fraction: 0.1 of 4 manifests leaves the selection set empty"):
        split(_manifests(4), 0, 0.1)
    with pytest.raises(SeriesError, match=r"^select_fraction: 0.9 of 4 manifests leaves the held-out set empty"):
        split(_manifests(4), 0, 0.9)
    with pytest.raises(SeriesError, match=r"^select_fraction: 0.5 of 1 manifests leaves"):
        split(_manifests(1), 0, 0.5)
    with pytest.raises(SeriesError, match=r"^split_seed: -1 must be >= 0"):
        split(_manifests(4), -1, 0.5)


def test_the_choice_is_made_on_the_selection_set_and_reported_on_the_held_out_set():
    found = series([_summary(name, succeed) for name, succeed in RUNS.items()])
    for seed in range(12):
        chosen = select(found, seed, 0.5)
        on = {m.manifest_hash for m in chosen.split.selection}
        ks = [k for k in range(len(CELLS)) if f"h{k}" in on]
        held = [k for k in range(len(CELLS)) if f"h{k}" not in on]
        wins = {name: sum(s(k, i) for k in ks for i in range(EPISODES)) for name, s in RUNS.items()}
        best = max(wins.values())
        expected = next(name for name in RUNS if wins[name] == best)  # the first of equal rates
        assert found.points[chosen.chosen].summary.submission_id == expected
        assert chosen.selected_on.succeeded == best and chosen.selected_on.completed == EPISODES * len(ks)
        succeeded = sum(RUNS[expected](k, i) for k in held for i in range(EPISODES))
        assert (chosen.held_out.succeeded, chosen.held_out.completed) == (succeeded, EPISODES * len(held))
        assert [c.succeeded for c in chosen.on_selection] == list(wins.values())
        assert "optimistically biased" in chosen.words()


def test_the_series_chart_draws_the_curve_and_the_differences(tmp_path):
    pytest.importorskip("matplotlib", reason="needs matplotlib (pip install evalfleet[plots])")
    from matplotlib.text import Text

    from scheduler import plots

    found = series([_summary(name, succeed) for name, succeed in RUNS.items()], baseline="more")
    figure = plots.series_figure(found, select(found, 1, 0.5))
    figure.canvas.draw()
    texts = [t.get_text() for t in figure.findobj(Text) if t.get_visible()]
    assert any(text.startswith("baseline: more (sha-more)") for text in texts), texts
    assert any(
        text.startswith("more (sha-more), chosen on 2 manifests, on the 2 held out (seed 1, fraction 0.5)")
        for text in texts
    ), texts
    assert any("98.33% intervals (Bonferroni, 3 comparisons)" in text for text in texts)
    renderer, bounds = figure.canvas.get_renderer(), figure.bbox
    for text in figure.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            box = text.get_window_extent(renderer)
            assert bounds.x0 - 0.5 <= box.x0 and box.x1 <= bounds.x1 + 0.5, text.get_text()
    path = tmp_path / "series.png"
    plots.plot_series(path, found)
    assert path.read_bytes().startswith(PNG_MAGIC)
