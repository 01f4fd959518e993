"""Test driver: a tiny GPT-2 of gpt2-tiny's shapes made and saved by transformers, and transformers' loss on the
debug recipe's first training windows (tests/conftest.py: tiny_gpt2, first_windows, gpt2_loss).

Usage: gpt2_folder.py OUT_DIR SEQ_LEN ROWS   -> writes OUT_DIR, prints {"loss": ...} as one JSON line.
The torchtitan 0.3 tests run it with the 0.2.2 venv's python: their own venv has no transformers.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import GPT2_TINY_FLAVOR, first_windows, gpt2_loss, tiny_gpt2  # noqa: E402


def main() -> None:
    out, seq_len, rows = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    gpt2 = tiny_gpt2(out, **GPT2_TINY_FLAVOR)
    print(json.dumps({"loss": gpt2_loss(gpt2, first_windows(seq_len, rows))}))


if __name__ == "__main__":
    main()
