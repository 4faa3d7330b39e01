"""``scopecheck bench stores`` reports, per store and setting, the cost of ``validate
--examples 5`` with the verdict it came with -- figures, never assertions on them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from scopecheck.bench.stores import suite
from scopecheck.cli import main

STORES = Path(__file__).resolve().parents[2] / "examples" / "stores"


def test_the_suite_is_every_factory_of_the_installed_stores() -> None:
    found, missing = suite()
    modules = {path.stem for path in STORES.glob("*_store.py")}
    named = {spec.split(":")[0].rsplit(".", 1)[-1] for spec in found}
    assert named | {why.split(":")[0] for why in missing} == modules
    assert all(spec.split(":")[1].startswith("make_") for spec in found)


@pytest.mark.rule("INSTALL-12")
def test_one_store_gets_its_figures_and_its_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    spec = "scopecheck.examples.stores.lmdb_store:make_durable_backend"
    with pytest.raises(SystemExit) as done:
        main(["bench", "stores", spec, "--runs", "1", "--json"])
    assert done.value.code == 0
    result = orjson.loads(capsys.readouterr().out)
    row = result["stores"][spec]
    assert result["benchmark"] == "stores" and result["examples"] == 5
    assert row["outcomes"] == ["passed"]  # its pinned verdict (test_store_adapters.py)
    assert row["crash_states"] > 0 and row["states_per_s"] > 0 and row["fault_runs"] > 0
    assert row["fault_runs_per_s"] > 0 and row["first_failure_s"] is None
    assert row["wall_s"] >= row["crash_s"] > 0
