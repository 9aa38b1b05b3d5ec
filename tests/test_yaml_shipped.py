"""The files primus ships are read with libyaml's parser (`yamlio._ShippedLoader`) and every other file
with the bounded pure-Python loader: the two must read every shipped file the same, and the faster
one keeps the checks that do not concern hostile input (duplicate keys, integers too long to convert)."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.errors import InputError
from primus.yamlio import is_shipped, loads_yaml, read_text

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p for d in ("models", "hardware", "constraints", "stacks", "primus")
                 for p in (ROOT / d).rglob("*.yaml"))


def test_every_shipped_yaml_file_reads_the_same_with_either_loader():
    assert len(SHIPPED) > 50
    for path in SHIPPED:
        assert is_shipped(path), path
        text = read_text(path)
        assert loads_yaml(text, str(path), shipped=True) == loads_yaml(text, str(path)), path


def test_user_files_are_not_shipped(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3.1-8b\n")
    assert not is_shipped(job)
    assert not is_shipped(ROOT / "examples" / "deepseek-v3-h100-1024.yaml")


@pytest.mark.parametrize("text,reason", [("a: 1\na: 2\n", "duplicate key 'a'"),
                                         ("a: " + "9" * 200 + "\n", "200 digits")])
def test_the_shipped_loader_keeps_the_key_and_integer_checks(text, reason):
    with pytest.raises(InputError, match=reason):
        loads_yaml(text, "x.yaml", shipped=True)
