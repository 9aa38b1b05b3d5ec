"""A measured profile that is wrong in ways review 48 (lows 7-9) found accepted or misnamed: a wrong
`format` value, an entry filed under a key that is not its call's, an integer of 201 digits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus.catalog.hardware import resolve_hardware
from primus.errors import InputError
from primus.measure.measured_profile import (
    DeviceInfo,
    Entry,
    MeasuredProfile,
    call_key,
    load_measured_profile,
    resolve_profile_option,
)
from primus.projection.timer import MemoryCall

CALL = MemoryCall(1024.0)


def _profile(tmp_path: Path) -> dict:
    prof = MeasuredProfile(DeviceInfo("cpu", "test CPU", "cpu", "2.0", "float32", 1, 1, 1), "2026-01-01")
    prof.add(Entry(CALL, 1e-3, (), "now"))
    return prof.to_json()


def _write(tmp_path: Path, data: dict | str) -> Path:
    path = tmp_path / "p.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_wrong_format_value_is_named_as_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {**_profile(tmp_path), "format": "x"})
    with pytest.raises(InputError) as err:
        resolve_profile_option(resolve_hardware("cpu", "test"), str(path))
    assert err.value.line() == (f"{path}: format: not a measured profile (expected \"format\": "
                                "\"primus-measured-profile\")")


def test_an_entry_under_another_key_is_refused(tmp_path: Path) -> None:
    data = _profile(tmp_path)
    data["entries"] = {"garbage": next(iter(data["entries"].values()))}
    with pytest.raises(InputError) as err:
        load_measured_profile(_write(tmp_path, data))
    assert "entries['garbage']: key does not match its call" in err.value.line()
    assert repr(call_key(CALL, "float32")) in err.value.line()


def test_an_integer_of_201_digits_is_refused(tmp_path: Path) -> None:
    text = json.dumps(_profile(tmp_path)).replace('"nbytes": 1024.0', '"nbytes": ' + "9" * 201)
    assert "9" * 201 in text
    with pytest.raises(InputError, match=r"an integer of 201 digits \(at most 100 are read\)"):
        load_measured_profile(_write(tmp_path, text))
