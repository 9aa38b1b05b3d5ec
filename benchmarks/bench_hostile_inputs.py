"""How fast hostile inputs are refused (the contract: well under a second, exit 2, one line).

Run: python benchmarks/bench_hostile_inputs.py
Times `primus job show` on malformed and hostile job files and `primus fit --rule` on hostile rule texts,
in-process (CliRunner), and prints the slowest refusal of each kind.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from primus.cli.main import cli  # noqa: E402
from tests.test_cli_contract import HOSTILE_TEXTS  # noqa: E402
from tests.test_fit_enumerate import HOSTILE_RULES, SMALL  # noqa: E402


def main() -> None:
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        slowest = (0.0, "")
        for name, text in HOSTILE_TEXTS.items():
            path = Path(tmp) / "job.yaml"
            path.write_text(text)
            start = time.perf_counter()
            result = runner.invoke(cli, ["job", "show", str(path)])
            elapsed = time.perf_counter() - start
            assert result.exit_code == 2, name
            slowest = max(slowest, (elapsed, name))
        print(f"hostile job files: {len(HOSTILE_TEXTS)} refused, slowest {slowest[0] * 1000:.0f} ms ({slowest[1]})")
        import yaml

        job = Path(tmp) / "small.yaml"
        job.write_text(yaml.safe_dump(SMALL))
        slowest = (0.0, "")
        for text in HOSTILE_RULES:
            start = time.perf_counter()
            result = runner.invoke(cli, ["fit", str(job), "--rule", text])
            elapsed = time.perf_counter() - start
            assert result.exit_code == 2, text
            slowest = max(slowest, (elapsed, text[:40]))
        print(f"hostile rules: {len(HOSTILE_RULES)} refused, slowest {slowest[0] * 1000:.0f} ms ({slowest[1]!r})")


if __name__ == "__main__":
    main()
