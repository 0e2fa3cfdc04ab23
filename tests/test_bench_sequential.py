"""The sequential benchmark (scripts.bench.sequential): how it judges verdicts, its options, and a
tiny run through real processes (a scheduler, two inference servers, workers), in which the script
itself checks that every repeated episode has the full run's outcome, that the sequential record
does not move after the stop, and that the scheduler's record is the statistic over the dispatch
order's prefix."""

from __future__ import annotations

import pytest

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.sequential import RateRule
from scripts.bench.sequential import (
    Truth,
    fixed_call,
    interval_after,
    is_right,
    main,
    paired_call,
    parse_args,
    read_until_decided,
    single_right,
)


@pytest.mark.timeout(30)
def test_paired_verdicts_are_read_as_the_scheduler_words_them() -> None:
    assert paired_call(pb.SequentialState(verdict="different", a_only=2, b_only=30)) == "B better"
    assert paired_call(pb.SequentialState(verdict="different", a_only=30, b_only=2)) == "A better"
    assert paired_call(pb.SequentialState(verdict="equivalent", a_only=5, b_only=6)) == "equivalent"
    # At the end the exact McNemar decides at 0.04: 20 vs 40 is p 0.013, 30 vs 40 is p 0.28.
    assert paired_call(pb.SequentialState(verdict="final", a_only=20, b_only=40)) == "B better"
    assert paired_call(pb.SequentialState(verdict="final", a_only=30, b_only=40)) == "no difference"
    with pytest.raises(ValueError, match="not a decided comparison"):
        paired_call(pb.SequentialState(verdict="", words="undecided"))


@pytest.mark.timeout(30)
def test_a_call_is_right_only_when_it_is_the_true_decisive_answer() -> None:
    tie = Truth(pairs=1000, a_successes=585, b_successes=590, a_only=100, b_only=105)
    far = Truth(pairs=1000, a_successes=550, b_successes=620, a_only=60, b_only=130)
    assert fixed_call(tie) == "no difference" and fixed_call(far) == "B better"
    assert is_right("no difference", 0.0, tie, 0.05) and not is_right("B better", 0.0, tie, 0.05)
    assert is_right("equivalent", 0.0, tie, 0.05) and not is_right("equivalent", 0.05, far, 0.05)
    assert is_right("B better", 0.05, far, 0.05) and not is_right("no difference", 0.05, far, 0.05)
    assert not is_right("A better", 0.05, far, 0.05)
    assert single_right("at_least", 0.4, 0.7, 0.52, 0.5) and not single_right("at_least", 0.5, 0.7, 0.48, 0.5)
    assert single_right("precise", 0.40, 0.50, 0.45, 0.5) and not single_right("precise", 0.40, 0.44, 0.45, 0.5)


@pytest.mark.timeout(30)
def test_reading_in_an_order_stops_where_the_rule_decides_and_only_then() -> None:
    rule = RateRule(threshold=0.5)
    successes_first = [True] * 40 + [False] * 60  # a rate of 40%, its successes read first
    verdict, read, low, high = read_until_decided(successes_first, rule)
    assert verdict == "at_least" and read < 40 and low >= 0.5, "read in a biased order, it is fooled"
    assert (low, high) == interval_after(successes_first, rule, read)
    spread = [i % 5 < 2 for i in range(100)]  # the same 40%, evenly spread
    verdict, read, _, high = read_until_decided(spread, rule)
    assert verdict in ("below", "complete") and high <= 0.5 + 1e-9


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenarios", "tie,huge"], "unknown scenario 'huge'"),
        (["--scenarios", "large", "--single", "tie"], "--single tie: run it in --scenarios too"),
        (["--margin", "0"], "--margin must be within (0, 1)"),
        (["--replicates", "0"], "--replicates must be >= 1"),
        (["--trap-replicates", "-1"], "--trap-replicates must be >= 0"),
        (["--tasks", "2", "--episodes", "3", "--trap-first", "7"], "--trap-first 7 exceeds the 6 episodes"),
    ],
)
def test_bad_options_are_one_line_naming_the_option(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_the_defaults_are_the_documented_run() -> None:
    args = parse_args([])
    assert args.scenarios == ["tie", "near", "small", "large"] and args.single == ["tie", "small", "large"]
    assert (args.tasks, args.episodes, args.kappa, args.shared_fraction, args.margin) == (50, 20, 2.0, 0.4, 0.05)


@pytest.mark.timeout(90)
def test_a_tiny_run_through_real_processes_prints_its_tables(capsys) -> None:
    argv = ["--replicates", "1", "--scenarios", "large", "--single", "large", "--tasks", "3", "--episodes", "5"]
    argv += ["--time-scale", "0.02", "--workers", "1", "--slots", "4"]
    argv += ["--trap-replicates", "1", "--trap-slots", "4", "--trap-first", "5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for method in ("| fixed N | 15 | 1.00 | 15 | 1.00 |", "| split |", "| split + margin |"):
        assert f"| 40% vs 60% {method}" in out, out
    assert "| large: A |" in out and "| threshold |" in out and "| precision |" in out
    assert "| naive reader: the full run in completion order |" in out
