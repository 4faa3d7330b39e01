"""A trivial dict-vs-dict state machine: it measures Hypothesis's own cost per step, the
baseline the storage machines are compared with (``scopecheck bench``)."""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule


class TrivialMachine(RuleBasedStateMachine):
    steps_run: ClassVar[int] = 0
    examples_run: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).examples_run += 1
        self.model: dict[int, int] = {}
        self.real: dict[int, int] = {}

    @rule(key=st.integers(0, 9), value=st.integers())
    def put(self, key: int, value: int) -> None:
        self.model[key] = value
        self.real[key] = value

    @rule(key=st.integers(0, 9))
    def delete(self, key: int) -> None:
        self.model.pop(key, None)
        self.real.pop(key, None)

    @rule(key=st.integers(0, 9))
    def get(self, key: int) -> None:
        assert self.model.get(key) == self.real.get(key)

    @invariant()
    def same(self) -> None:
        type(self).steps_run += 1
        assert self.model == self.real
