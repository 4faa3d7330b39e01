"""Fork option and lane checks that need no backend (the classifier and the option types)."""

from __future__ import annotations

import pytest

from scopecheck.models.errors import ScopecheckError
from scopecheck.models.fork import BranchFork, TreeFork


@pytest.mark.rule("FORK-1")
def test_fork_option_errors_name_the_field_and_optional_fields_accept_none() -> None:
    """``details['field']`` names the bad option; ``None`` is fine only where the field is
    optional (entry id, destination id), never for a branch fork's branch."""
    for build, field in (
        (lambda: BranchFork(""), "branch"),
        (lambda: BranchFork(None), "branch"),  # type: ignore[arg-type]
        (lambda: BranchFork("main", entry_id="a\x00"), "entry_id"),
        (lambda: BranchFork("main", id=""), "id"),
        (lambda: TreeFork(id=3), "id"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ScopecheckError) as info:
            build()
        assert info.value.code == "invalid_fork_options"
        assert info.value.details["field"] == field
    assert BranchFork("main", entry_id=None, id=None).entry_id is None
    assert TreeFork(id=None).id is None


@pytest.mark.rule("FORK-2")
def test_branch_lane_errors_carry_the_branch_name() -> None:
    """The shared classifier's refusals say which branch: ``details['branch']`` for an unknown
    or data-only branch, ``details['lane']`` for a corrupt lane."""
    from scopecheck.models.errors import CorruptError
    from scopecheck.models.fork_policy import check_branch_lane

    options = BranchFork("feature")
    for has_tip, has_config, has_state, code, key in (
        (False, False, False, "unknown_branch", "branch"),
        (True, False, False, "data_only_branch", "branch"),
        (False, True, True, "corrupt", "lane"),
        (True, True, False, "corrupt", "lane"),
    ):
        with pytest.raises(ScopecheckError) as info:
            check_branch_lane(options, has_tip, has_config, has_state)
        assert info.value.code == code
        assert info.value.details[key] == "feature"
        assert isinstance(info.value, CorruptError) == (code == "corrupt")
    check_branch_lane(options, True, True, True)
