"""Call the Python API as a user's script would and print what the caller catches.

    python tests/helpers/api_call.py MODEL_DIR "generate(length='8')"

Loads MODEL_DIR with `aogpt_plugin.load` (or evaluates `load(...)` itself when the call starts with
`load(`), then the call on the loaded model. An `InputError` prints `error: <message>` and exits 2, as
a script that catches it would report it; any other exception leaves with its traceback (and counts).
"""

import sys

import aogpt_plugin
from aogpt_plugin.errors import InputError

model_dir, call = sys.argv[1], sys.argv[2]
try:
    if call.startswith("load("):
        eval("aogpt_plugin." + call)  # noqa: S307 - the fault table's own fixed calls
    else:
        lm = aogpt_plugin.load(model_dir)
        eval("lm." + call)  # noqa: S307
except InputError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
print("no error")
