"""Test driver: load exported folders with transformers in a process that cannot import aogpt or torchtitan.

Usage (conftest.load_with_transformers runs it as `python -I`, so no PYTHONPATH and no cwd on sys.path):
    hf_load.py CASES_JSON INPUTS.pt OUT.pt
CASES_JSON is {name: {"dir": exported folder, "texts": [str, ...]}}; INPUTS.pt holds f"{name}/tokens"
(B, T) and f"{name}/order" (B, T). Writes OUT.pt: f"{name}/l2r" and f"{name}/order" (float32 logits of
AutoModel.from_pretrained(dir, trust_remote_code=True), left to right and in the given order) and, for
non-empty texts, f"{name}/ids" and f"{name}/decoded" from AutoTokenizer.

A finder placed first refuses aogpt_plugin and torchtitan however they are installed (aogpt is an
editable install here), so transformers must load the model from the folder's own files.
"""

import importlib.abc
import json
import sys

REFUSED = ("aogpt_plugin", "torchtitan")


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"{name} is refused in this process", name=name)
        return None


def main() -> None:
    sys.meta_path.insert(0, Refuse())
    try:
        import aogpt_plugin  # noqa: F401

        raise SystemExit("aogpt_plugin can be imported")
    except ModuleNotFoundError:
        pass

    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(1)  # as the test process: the same kernels in the same reduction order
    cases, inputs, out = json.loads(sys.argv[1]), torch.load(sys.argv[2]), {}
    for name, case in cases.items():
        model = AutoModel.from_pretrained(case["dir"], trust_remote_code=True, dtype=torch.float32)
        assert not model.training and type(model).__name__ == "AOGPTModel"
        with torch.no_grad():
            out[f"{name}/l2r"] = model(inputs[f"{name}/tokens"]).logits
            out[f"{name}/order"] = model(inputs[f"{name}/tokens"], order=inputs[f"{name}/order"]).logits
        if case["texts"]:
            tok = AutoTokenizer.from_pretrained(case["dir"], trust_remote_code=True)
            out[f"{name}/ids"] = [tok(text)["input_ids"] for text in case["texts"]]
            out[f"{name}/decoded"] = [tok.decode(ids) for ids in out[f"{name}/ids"]]
    leaked = sorted(m for m in sys.modules if m.partition(".")[0] in REFUSED)
    assert not leaked, leaked
    torch.save(out, sys.argv[3])


if __name__ == "__main__":
    main()
