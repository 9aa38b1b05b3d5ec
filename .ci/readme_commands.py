"""Print the README's two set-up commands (the two ```bash blocks of its "## Set-up" section), so that
.ci/run runs exactly what the README tells a new user to type."""

import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
setup = text.split("\n## Set-up", 1)[1].split("\n## ", 1)[0]
blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", setup, flags=re.S)]
if len(blocks) != 2:
    sys.exit(f"{sys.argv[1]}: the Set-up section must hold exactly two bash blocks, found {len(blocks)}")
print("\n".join(blocks))
