"""code.waiting_rule (letcc.codes.waiting_rule): the counts a runtime decides a
round by agree with the code's own can_decode / is_complete on every set of
workers, and bad rules are named."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import letcc
from letcc.codes.waiting_rule import Coverage

CODES = [lambda: letcc.LeTCC(4, 8), lambda: letcc.LeTCC(3, 7, systematic=True), lambda: letcc.LeTCC(3, 9, adversaries=2),
         lambda: letcc.BACC(3, 6), lambda: letcc.BACC(2, 9, adversaries=1), lambda: letcc.BACC(2, 5, systematic=True),
         lambda: letcc.Replication(3, 2), lambda: letcc.Replication(2, 3), lambda: letcc.Uncoded(5)]


@pytest.mark.parametrize("make", CODES)
def test_the_rule_agrees_with_the_code_on_every_set_and_prefix(make, rng):
    code = make()
    N = code.N
    rule = code.waiting_rule
    for size in range(N + 1):
        for F in itertools.combinations(range(N), size):
            assert rule.decodable.holds(F) == bool(code.can_decode(list(F))), F
            assert rule.complete.holds(F) == bool(code.is_complete(list(F))), F
    for _ in range(50):                                  # first_prefix: the smallest prefix that holds
        js = rng.permutation(N)[:int(rng.integers(0, N + 1))].tolist()
        for cov, ask in ((rule.decodable, code.can_decode), (rule.complete, code.is_complete)):
            want = next((p for p in range(1, len(js) + 1) if ask(js[:p])), None)
            assert cov.first_prefix(js) == want


def test_every_code_states_a_rule_and_the_contract_names_it():
    for make in CODES:
        assert make().waiting_rule is not None
    with pytest.raises(TypeError, match="has no 'waiting_rule'"):
        class NoRule:
            K, N, adversaries, systematic_workers, decodes_exactly = 1, 2, 0, None, False

            def encode(self, X): ...
            def decode(self, Y, a): ...
            def can_decode(self, a): ...
            def is_complete(self, a): ...

        letcc.codes.check_code(NoRule())


def test_coverage_rules_and_their_errors():
    c = Coverage([0, 1, -1, 1, 0], [1, 2])
    assert c.first_prefix([2, 0, 1]) is None and c.first_prefix([2, 0, 1, 3]) == 4 and c.holds([3, 4, 1])
    assert Coverage.count(4, 3).first_prefix([3, 1]) is None and Coverage.count(4, 3).first_prefix([3, 1, 0, 2]) == 3
    assert Coverage.each([4, 1], 5).first_prefix([1, 0, 2, 4, 3]) == 4
    with pytest.raises(ValueError, match="group 2 is not -1 or one of the 2 groups"):
        Coverage([0, 2], [1, 1])
    with pytest.raises(ValueError, match=r"every group needs >= 1 answer, got need \[1, 0\]"):
        Coverage([0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least one group"):
        Coverage([], [])
