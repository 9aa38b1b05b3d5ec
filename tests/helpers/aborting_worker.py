"""A stand-in measurement worker: rank 0 writes its result, then every rank aborts, as a gloo worker
can while tearing its process group down."""

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    cfg = json.loads(Path(sys.argv[1]).read_text())
    if sys.argv[2] == "0":
        Path(cfg["out"]).write_text(json.dumps({"measured": cfg["value"]}))
    sys.stderr.write("terminate called without an active exception\n")
    sys.stderr.flush()
    os.abort()
