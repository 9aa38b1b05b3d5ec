"""How `fit` ranks and labels its fixes (review 01, items 6 and 20): a tight fix (less headroom than
the allocator's uncertain reserve, issue 15) ranks after every fix with room; then fewest pins changed,
then fastest; `changed` names an axis by its name and any other option by its path, `pins_changed` says
which pinned axes a fix changes (a fix that sets a pinned `recompute` changes a pin), and the table
shows every option a fix sets."""

from __future__ import annotations

import json

BASE = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 64,
        "precision": "bf16"}
# Llama 3.1 8B at TP1 DP8, no recompute, distributed optimizer: 76.63 GiB, 3.13 GiB over the 73.50 GiB
SP_TP1 = {**BASE, "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "dp": 8, "mbs": 1, "sp": True,
                               "recompute": "none", "sharding": "dist_opt"}}
# Llama 3.1 70B at TP4 PP8 VP5 on 64 H100 without recompute: 4.64 GiB over; one recomputed layer per chunk fits
L70 = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192, "global_batch_size": 128,
       "parallel": {"tp": 4, "pp": 8, "vp": 5, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                    "sharding": "dist_opt"}}


def _alternatives(run_cli, path: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    code, out, _ = run_cli("fit", path, "--format", "json")
    assert code == 1
    return json.loads(out)["alternatives"]  # type: ignore[no-any-return]


def test_fixes_with_room_rank_before_tight_ones(run_cli, write_job):
    alts = _alternatives(run_cli, write_job(SP_TP1))
    tight = [a["tight"] for a in alts]
    assert tight == sorted(tight)
    first = alts[0]
    assert first["changed"] == ["sharding"] and first["parallel"]["sharding"] == "zero2" and not first["tight"]


def test_fixes_with_room_rank_by_fewest_pins_changed_then_fastest(run_cli, write_job):
    alts = [a for a in _alternatives(run_cli, write_job(SP_TP1)) if not a["tight"]]
    keys = [(len(a["pins_changed"]), -a["tokens_per_s_per_gpu"]) for a in alts]
    assert keys == sorted(keys)


def test_a_fix_that_sets_a_pinned_recompute_is_marked_as_changing_that_pin(run_cli, write_job):
    fix = next(a for a in _alternatives(run_cli, write_job(L70)) if "parallel.recompute_num_layers" in a["options"])
    assert fix["changed"] == ["recompute", "parallel.recompute_method", "recompute_num_layers"]
    assert fix["pins_changed"] == ["recompute"]
    assert fix["options"] == {"parallel.recompute": "full", "parallel.recompute_method": "block",
                              "parallel.recompute_num_layers": 1}


def test_axis_changes_are_named_like_the_axes_an_option_fix_sets(run_cli, write_job):
    for alt in _alternatives(run_cli, write_job(L70)):
        for name in alt["changed"]:
            assert not name.startswith("parallel.") or name == "parallel.recompute_method", name


def _table_rows(text: str) -> list[list[str]]:
    """The rows of the nearest-layouts table, each cell's wrapped lines joined with a space."""
    rows: list[list[str]] = []
    for line in text.split("nearest legal layouts", 1)[1].splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            rows.append(cells)
        else:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return rows


def test_the_table_shows_every_option_a_fix_sets_and_the_pins_it_changes(run_cli, write_job):
    _, out, _ = run_cli("fit", write_job(L70))
    assert "pins changed" in out
    row = next(r for r in _table_rows(out) if "recompute_num_layers=1" in r[1])
    assert row[2].replace(" ", "") == "recompute=full,parallel.recompute_method=block,recompute_num_layers=1"
    assert row[3] == "recompute"


def test_the_table_marks_a_tight_fix(run_cli, write_job):
    # Llama 3.1 70B at 6,144 tokens, TP1 PP8 on 64 H100: TP alone fits, with less headroom than the reserve
    _, out, _ = run_cli("fit", write_job({**L70, "seq_len": 6144,
                                           "parallel": {"tp": 1, "pp": 8, "cp": 1, "mbs": 1, "sp": False,
                                                        "recompute": "none", "sharding": "dist_opt"}}))
    row = next(r for r in _table_rows(out) if r[2].replace(" ", "") == "tp")
    assert row[3] == "tp" and row[5].endswith("(tight)")
