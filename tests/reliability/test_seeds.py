"""A randomised test's seed: new every run unless one is given to replay, and always printed."""

from __future__ import annotations

import pytest

from tests.support.seeds import run_seed


def test_a_new_seed_is_drawn_each_run_and_printed(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RAFKA_SEED", raising=False)
    monkeypatch.delenv("RAFKA_TEST_SEED", raising=False)
    seeds = {run_seed("the nemesis", variable="RAFKA_TEST_SEED") for _ in range(5)}
    assert len(seeds) > 1
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 5
    assert all("drawn" in line and "RAFKA_TEST_SEED=" in line for line in printed)


def test_a_given_seed_replays(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAFKA_SEED", "41")
    monkeypatch.delenv("RAFKA_TEST_SEED", raising=False)
    assert run_seed("the nemesis", variable="RAFKA_TEST_SEED") == 41
    assert run_seed("the fuzzer") == 41
    monkeypatch.setenv("RAFKA_TEST_SEED", "7")  # the test's own variable wins
    assert run_seed("the nemesis", variable="RAFKA_TEST_SEED") == 7
    assert "the nemesis: seed 7 (given; RAFKA_TEST_SEED=7 replays it)" in capsys.readouterr().out
