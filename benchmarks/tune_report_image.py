"""Regenerate docs/images/tune-report.png: run the default `primus tune` (no LLM) into a temporary
directory and photograph the top of its report.html in headless Chromium, so the picture in the README
always shows what the tool prints today.

    python benchmarks/tune_report_image.py            # writes docs/images/tune-report.png
    python benchmarks/tune_report_image.py --out x.png
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WINDOW = "1200,1500"  # CSS pixels: the question, the answer and the pipeline timeline of the default report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "images" / "tune-report.png"))
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("tune_report_image: no Chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="primus-report-image-") as tmp:
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "primus.cli.main", "tune", "--llm", "none", "--out", str(run)],
                       check=True, stdout=subprocess.DEVNULL, cwd=tmp)
        shot = Path(tmp) / "shot.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={WINDOW}", f"--screenshot={shot}", (run / "report.html").as_uri()],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        shutil.copyfile(shot, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
