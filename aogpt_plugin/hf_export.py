"""`aogpt export SRC OUT_DIR`: a model folder (or a checkpoint) -> a Hugging Face folder that is still a model folder.

    model = transformers.AutoModel.from_pretrained(OUT_DIR, trust_remote_code=True)
    logits = model(input_ids, order=order).logits   # logits[:, j] scores input_ids[:, order[:, j]]

OUT_DIR is the folder `aogpt convert` writes (model.safetensors, config.json in its format, a
tokenizer.json copy) plus what `transformers` needs to load it with `trust_remote_code`: config.json
also holds `model_type`, `architectures`, `auto_map` and every model arg at its top level,
`configuration_aogpt.py` and `modeling_aogpt.py` hold the classes, and the tokenizer files let
`AutoTokenizer` read it (GPT-2: vocab.json + merges.txt rebuilt from tiktoken's encoding; a
tokenizer.json: the copy; `symbols:V` has none). So `aogpt sample/eval/lm-eval --model OUT_DIR` read
it like any model folder, and it can be shared on the Hub as MDLM, LLaDA and Dream share theirs.

modeling_aogpt.py is generated, not kept by hand: the source files of model/model.py and of the
package modules it imports (model/args.py, errors.py) are concatenated with their in-package imports
removed, and a thin `PreTrainedModel` wraps the AOGPT module under `model.` (transformers adds the
prefix to the folder's unprefixed weight names). library_noise.py comes along: the wrapper drops the
known harmless lines of torchao (which transformers imports) before its own transformers import. The generator refuses, naming file and line, any
import that is not torch or the standard library, so the exported code never needs aogpt or torchtitan.
Only `AutoModel` is mapped, not `AutoModelForCausalLM`: slot j of an AO-GPT scores the token at
position order[j] from the tokens at order[:j] (slot 0 holds the [None] start), whereas a causal LM's
position j scores token j+1, and `generate()` would read the wrong slot.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import os
import sys
from typing import TYPE_CHECKING

from .errors import UserError

if TYPE_CHECKING:  # torch and the model folder load only when an export runs (fast --help)
    import torch

    from .model_dir import ModelDirConfig

PACKAGE = "aogpt_plugin"
# the model (and what it imports in the package), and the known library noise, dropped before transformers' import
MODEL_MODULES = ("aogpt_plugin.model.args", "aogpt_plugin.model.model", "aogpt_plugin.library_noise")
# Members left out of the export, with why: each reaches outside the exported code.
TRAINING_ONLY = {
    "aogpt_plugin.model.args": {
        "AOGPTModelArgs.update_from_config": "torchtitan's hook: reads the run's settings and their tokenizer",
    },
}
ALLOWED_IMPORTS = frozenset({"torch", *sys.stdlib_module_names})  # the model code's; the wrapper adds transformers
CONFIGURATION_FILE, MODELING_FILE = "configuration_aogpt.py", "modeling_aogpt.py"
TOKENIZER_CONFIG = "tokenizer_config.json"
WRAPPER_NAMES = ("AOGPTConfig", "AOGPTOutput", "AOGPTPreTrainedModel", "AOGPTModel", "PreTrainedModel", "ModelOutput")
HF_CONFIG = {
    "model_type": "aogpt",
    "architectures": ["AOGPTModel"],
    "auto_map": {
        "AutoConfig": "configuration_aogpt.AOGPTConfig",
        "AutoModel": "modeling_aogpt.AOGPTModel",
    },
}


class ExportSourceError(UserError):
    """The package's model source cannot be exported as it stands (a bug in aogpt, found by the tests)."""


# ---- modeling_aogpt.py from the package's own source ---------------------------------------------
def _read_module(name: str) -> tuple[str, str]:
    """(source, file) of an in-package module; a package (__init__) is refused: import from the defining module."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ExportSourceError(f"cannot export the model: module {name!r} has no source file")
    if spec.submodule_search_locations is not None:
        raise ExportSourceError(
            f"cannot export the model: {name!r} is a package; import from the module that defines the names"
        )
    with open(spec.origin, encoding="utf-8") as f:
        return f.read(), spec.origin


@dataclasses.dataclass
class _Module:
    name: str
    file: str  # as shown in messages and headers: aogpt_plugin/model/model.py
    text: str
    cuts: list[tuple[int, int, str]]  # (first line, last line, replacement) 1-based, inclusive
    deps: dict[str, list[str]]  # in-package module -> the names imported from it
    defines: set[str]


def _dropped_spans(tree: ast.Module, module: str, members: dict[str, str]) -> list[tuple[int, int, str]]:
    spans = []
    for path, why in members.items():
        node, body = None, tree.body
        for part in path.split("."):
            node = next((n for n in body if getattr(n, "name", None) == part), None)
            if node is None:
                raise ExportSourceError(f"cannot export the model: TRAINING_ONLY names {module}.{path}, which is gone")
            body = getattr(node, "body", [])
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        indent = " " * node.col_offset
        spans.append((first, node.end_lineno, f"{indent}# {path.split('.')[-1]}: not exported ({why})\n"))
    return spans


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _scan(name: str, text: str, file: str) -> _Module:
    """Check every import of one module: in-package ones (top level, `from X import a, b`) are cut and
    become dependencies; anything but torch and the standard library is refused."""
    tree = ast.parse(text, filename=file)
    shown = os.path.relpath(file, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cuts = _dropped_spans(tree, name, TRAINING_ONLY.get(name, {}))
    inside_cut = lambda node: any(a <= node.lineno <= b for a, b, _ in cuts)
    package = name.rpartition(".")[0]
    deps: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or inside_cut(node):
            continue
        where = f"{shown} line {node.lineno}"
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            cuts.append((node.lineno, node.end_lineno, ""))  # one, at the top of the generated file
            continue
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == PACKAGE):
            target = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            if node not in tree.body:
                raise ExportSourceError(
                    f"cannot export the model: {where} imports {target} inside a function or block; the exported "
                    "code cannot reach the package (move the code out of the model, or list it in hf_export.TRAINING_ONLY)"
                )
            if node.module is None or any(a.asname or a.name == "*" for a in node.names):
                raise ExportSourceError(
                    f"cannot export the model: {where}: write in-package imports as `from .module import name, ...`"
                )
            deps.setdefault(target, []).extend(a.name for a in node.names)
            cuts.append((node.lineno, node.end_lineno, ""))
            continue
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        for module in modules:
            if module.split(".")[0] not in ALLOWED_IMPORTS:
                raise ExportSourceError(
                    f"cannot export the model: {where} imports {module!r}; the exported modeling code may import "
                    "only torch, transformers and the standard library"
                )
    return _Module(name, shown, text, sorted(cuts), deps, _top_level_names(tree))


def _emit(module: _Module) -> str:
    lines = module.text.splitlines(keepends=True)
    for first, last, replacement in reversed(module.cuts):
        lines[first - 1 : last] = [replacement] if replacement else []
    return f"# ---- {module.file} " + "-" * max(0, 90 - len(module.file)) + "\n" + "".join(lines).strip() + "\n"


def model_source(roots: tuple[str, ...] = MODEL_MODULES, read=_read_module) -> tuple[str, list[str]]:
    """The model's code as one module (dependencies first) and the files it came from. `read(name)`
    returns (source, file); tests pass their own sources."""
    done: dict[str, _Module] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            raise ExportSourceError(f"cannot export the model: import cycle {' -> '.join([*visiting, name])}")
        visiting.append(name)
        text, file = read(name)
        module = _scan(name, text, file)
        for dep, names in module.deps.items():
            visit(dep)
            missing = sorted(set(names) - done[dep].defines)
            if missing:
                raise ExportSourceError(
                    f"cannot export the model: {module.file} imports {missing} from {dep}, which does not define them"
                )
        visiting.pop()
        done[name] = module

    for root in roots:
        visit(root)
    owner: dict[str, str] = dict.fromkeys(WRAPPER_NAMES, "the Hugging Face wrapper")
    for module in done.values():
        for defined in sorted(module.defines):
            if defined in owner:
                raise ExportSourceError(
                    f"cannot export the model: {module.file} and {owner[defined]} both define {defined!r}"
                )
            owner[defined] = module.file
    code = "\n\n".join(_emit(m) for m in done.values())
    return code, [m.file for m in done.values()]


_WRAPPER = '''
# ---- the Hugging Face classes (aogpt_plugin/hf_export.py) ------------------------------------------
import dataclasses as _dataclasses

import torch

quiet_library_noise(torch.cuda.is_available())  # what importing transformers prints that says nothing (torchao)

from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_aogpt import AOGPTConfig


@_dataclasses.dataclass
class AOGPTOutput(ModelOutput):
    """logits[:, j]: the model's scores (vocab_size columns) for the token at position order[:, j]."""

    logits: torch.Tensor | None = None


class AOGPTPreTrainedModel(PreTrainedModel):
    config_class = AOGPTConfig
    base_model_prefix = "model"  # the folder's weights are AOGPT's names; transformers adds "model."
    _no_split_modules = ["TransformerBlock"]

    def _init_weights(self, module):
        """AO-GPT's own init, for a model built from a config (loaded weights are never re-initialised)."""
        if isinstance(module, AOGPT):
            module.init_weights()


class AOGPTModel(AOGPTPreTrainedModel):
    """AO-GPT: `forward(input_ids, order)` scores, at slot j, the token at position order[:, j] given the
    tokens at order[:, :j] (slot 0 sees only the [None] start embedding)."""

    def __init__(self, config: AOGPTConfig):
        super().__init__(config)
        self.model = AOGPT(AOGPTModelArgs.from_dict(config.aogpt_model_args()))
        self.post_init()

    def get_input_embeddings(self):
        return self.model.tok_embeddings

    def forward(self, input_ids, order=None, attention_mask=None, return_dict=None):
        """input_ids (B, n) in text order; order (B, L) or (L,), L <= n: the first L entries of a permutation
        of 0..n-1 (default: left to right). Returns logits (B, L, vocab_size): row j scores
        input_ids[:, order[:, j]]. There is no padding: a batch holds sequences of one length."""
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("AOGPTModel reads no padding: pass sequences of one length without masked positions")
        if order is not None:
            order = torch.as_tensor(order, device=input_ids.device)
            if order.dim() == 1:
                order = order.expand(input_ids.shape[0], -1)
        logits = self.model(input_ids, order)[..., : self.config.vocab_size]
        if return_dict is False:
            return (logits,)
        return AOGPTOutput(logits=logits)
'''


def modeling_file() -> str:
    """modeling_aogpt.py: the package's model code, then the Hugging Face classes; checked to compile."""
    code, files = model_source()
    text = (
        f"# Generated by `aogpt export` (aogpt_plugin/hf_export.py) from {', '.join(files)}.\n"
        "# Do not edit: export again. It imports only torch, transformers and the standard library.\n"
        "from __future__ import annotations\n\n" + code + _WRAPPER
    )
    compile(text, MODELING_FILE, "exec")
    return text


_CONFIGURATION = '''# Generated by `aogpt export` (aogpt_plugin/hf_export.py) from aogpt_plugin/model/args.py. Do not edit.
"""AOGPTConfig: the model args at the top level (as transformers configs keep them), defaults of AOGPTModelArgs."""

from transformers import PretrainedConfig

MODEL_ARGS = {model_args}
AOGPT_FOLDER_KEYS = ("format", "format_version", "model_sha256", "model_args")


class AOGPTConfig(PretrainedConfig):
    model_type = "aogpt"
    attribute_map = {{
        "hidden_size": "dim",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "max_position_embeddings": "max_seq_len",
    }}

    def __init__(self, **kwargs):
        nested = kwargs.pop("model_args", None) or {{}}  # aogpt's own copy of the same args
        for key, default in MODEL_ARGS.items():
            setattr(self, key, kwargs.pop(key, nested.get(key, default)))
        super().__init__(**kwargs)

    def aogpt_model_args(self) -> dict:
        return {{key: getattr(self, key) for key in MODEL_ARGS}}

    def to_dict(self):
        """Saved by transformers, the folder is a plain Hugging Face one: its weights are named `model.*`
        and no longer match the sha256 aogpt recorded, so the aogpt folder keys are left out."""
        out = super().to_dict()
        for key in AOGPT_FOLDER_KEYS:
            out.pop(key, None)
        return out
'''


def configuration_file() -> str:
    from .model import AOGPTModelArgs

    defaults = {f.name: f.default for f in dataclasses.fields(AOGPTModelArgs)}
    text = _CONFIGURATION.format(model_args=repr(defaults))
    compile(text, CONFIGURATION_FILE, "exec")
    return text


# ---- tokenizer files ---------------------------------------------------------------------------------
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (vocab.json and merges.txt spell tokens with it)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return chars


@functools.cache  # half a second; a process exports once, the tests several times
def gpt2_vocab_and_merges(name: str = "gpt2") -> tuple[dict[str, int], list[str]]:
    """GPT-2's vocab.json and merges.txt, rebuilt from tiktoken's encoding (offline through
    TIKTOKEN_CACHE_DIR): each token's merge is the last step of BPE run on its bytes with the lower
    ranks only. Equals OpenAI's encoder.json and vocab.bpe (tests/test_hf_export.py)."""
    import tiktoken

    enc = tiktoken.get_encoding(name)
    ranks = {token: enc.encode_single_token(token) for token in enc.token_byte_values()}
    ranks = dict(sorted(ranks.items(), key=lambda kv: kv[1]))  # files in id order, as OpenAI's
    alphabet = _byte_alphabet()
    spell = lambda token: "".join(alphabet[b] for b in token)
    merges = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            pairs = (parts[i] + parts[i + 1] for i in range(len(parts) - 1))
            _, i = min((ranks[p], i) for i, p in enumerate(pairs) if ranks.get(p, rank) < rank)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        merges.append(f"{spell(parts[0])} {spell(parts[1])}")
    vocab = {spell(token): rank for token, rank in ranks.items()}
    vocab.update({special: enc.encode_single_token(special) for special in enc.special_tokens_set})
    return vocab, merges


def tokenizer_files(config: ModelDirConfig, src: str) -> tuple[dict[str, bytes], int | None]:
    """The Hugging Face tokenizer files beside a tokenizer.json copy (model_dir copies that one), and
    the end-of-text id. The tokenizer must be the model's: a folder whose vocabulary differs is refused."""
    from .data.tokenizer import SYMBOLS

    if config.tokenizer.startswith(SYMBOLS):
        return {}, None  # bare symbols have no text, so no Hugging Face tokenizer
    tok = config.build_tokenizer(src, check_vocab=True)
    eos = tok.decode([tok.eos_id])
    common = {"eos_token": eos, "model_max_length": config.model_args.max_seq_len}
    common["clean_up_tokenization_spaces"] = False
    if config.tokenizer.endswith(".json"):
        settings = {"tokenizer_class": "PreTrainedTokenizerFast", **common}
        return {TOKENIZER_CONFIG: _json_bytes(settings)}, tok.eos_id
    vocab, merges = gpt2_vocab_and_merges(config.tokenizer)
    settings = {"tokenizer_class": "GPT2Tokenizer", "bos_token": eos, "unk_token": eos, **common}
    settings.update(add_prefix_space=False, add_bos_token=False)
    files = {
        "vocab.json": _json_bytes(vocab, indent=None),
        "merges.txt": ("#version: 0.2\n" + "\n".join(merges) + "\n").encode("utf-8"),
        TOKENIZER_CONFIG: _json_bytes(settings),
    }
    return files, tok.eos_id


def _json_bytes(value, indent: int | None = 2) -> bytes:
    return (json.dumps(value, indent=indent, ensure_ascii=False) + "\n").encode("utf-8")


# ---- the export ---------------------------------------------------------------------------------------
def check_source(src: str, weights: str | None, step: int | None, tokenizer: str | None) -> bool:
    """SRC is a model folder (True) or a checkpoint (False) (model_dir.source_kind), checked before OUT_DIR
    is taken; the options that pick weights from a checkpoint are refused for a model folder."""
    from .model_dir import MODEL_FOLDER, source_kind

    if source_kind(src, "SRC") != MODEL_FOLDER:
        return False
    given = [
        flag
        for flag, value in (("--weights", weights), ("--step", step), ("--tokenizer", tokenizer))
        if value is not None
    ]
    if given:
        raise UserError(f"{given[0]} applies to a checkpoint SRC; {src!r} is a model folder, which has one")
    return True


def read_source(
    src: str, weights: str | None, step: int | None, tokenizer: str | None, verify: bool = True
) -> tuple[dict[str, torch.Tensor], ModelDirConfig, str]:
    """Weights and config of SRC, a model folder or (through convert.py) a checkpoint, and the folder
    a relative tokenizer.json is read from."""
    from .convert import read_checkpoint
    from .model_dir import load_model_dir

    if check_source(src, weights, step, tokenizer):
        loaded = load_model_dir(src, verify=verify)
        state = {k: v.detach().contiguous() for k, v in loaded.model.state_dict().items()}
        return state, loaded.config, src
    state, config = read_checkpoint(src, weights or "ema", step, tokenizer)
    return state, config, "."


def hf_config(config: ModelDirConfig, eos_id: int | None, dtype: torch.dtype) -> dict:
    """The keys transformers reads, beside aogpt's own (model_dir.ModelDirConfig.to_json)."""
    args = {k: v for k, v in config.model_args.to_dict().items() if k != "vocab_size"}  # vocab_size: aogpt's key
    out = {**HF_CONFIG, **args, "dtype": str(dtype).removeprefix("torch.")}
    if eos_id is not None:
        out["eos_token_id"] = eos_id
    return out


def export(
    src: str,
    out_dir: str,
    force: bool = False,
    weights: str | None = None,
    step: int | None = None,
    tokenizer: str | None = None,
    verify: bool = True,
) -> ModelDirConfig:
    """Write OUT_DIR (atomically, through model_dir.save_model_dir); returns its config."""
    from .model_dir import check_out_dir, read_config, save_model_dir

    files = {MODELING_FILE: modeling_file().encode("utf-8"), CONFIGURATION_FILE: configuration_file().encode("utf-8")}
    check_source(src, weights, step, tokenizer)  # cheap: before OUT_DIR is locked
    check_out_dir(out_dir, force)
    try:
        state, config, where = read_source(src, weights, step, tokenizer, verify)
        tokenizer_bytes, eos_id = tokenizer_files(config, where)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM while reading: the command's one line says so
        e.detail = f"{out_dir!r} was not written"
        raise
    files.update(tokenizer_bytes)
    spec = config.tokenizer
    if spec.endswith(".json") and not os.path.isabs(spec):  # model_dir copies it from here
        spec = os.path.join(where, spec)
    dtype = next(iter(state.values())).dtype
    stale = set(HF_CONFIG) | {"dtype", "eos_token_id"} | set(config.model_args.to_dict())  # a re-export's old keys
    extra = {k: v for k, v in config.extra.items() if k not in stale} | hf_config(config, eos_id, dtype)
    config = dataclasses.replace(config, tokenizer=spec, extra=extra, model_sha256=None)
    save_model_dir(out_dir, state, config, files)
    return read_config(out_dir)


# ---- `aogpt export` ---------------------------------------------------------------------------------------
def add_to(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="model folder or checkpoint -> Hugging Face folder (AutoModel, trust_remote_code)",
        description="Write OUT_DIR: SRC's model folder (aogpt still reads it) plus the config keys, code and tokenizer "
        "files transformers needs: AutoModel.from_pretrained(OUT_DIR, trust_remote_code=True). See docs/export.md.",
    )
    p.add_argument("src", help="a model folder (`aogpt convert`), or a checkpoint folder as `aogpt convert` takes")
    p.add_argument("out_dir", help="output folder (must not exist unless --force); still a model folder for aogpt")
    p.add_argument("--weights", choices=("ema", "raw"), default=None, help="checkpoint SRC only: EMA (default) or raw")
    p.add_argument("--step", type=int, default=None, help="checkpoint SRC only: which step-N folder")
    p.add_argument("--tokenizer", default=None, help="checkpoint SRC only, as `aogpt convert --tokenizer`")
    p.add_argument(
        "--force", action="store_true", help="replace OUT_DIR (only a model folder, once the new one is done)"
    )
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip SRC's model.safetensors sha256 check")
    p.set_defaults(run=run)


def run(args) -> int:
    config = export(args.src, args.out_dir, args.force, args.weights, args.step, args.tokenizer, args.verify)
    a = config.model_args
    print(
        f"exported {args.src} -> {args.out_dir}: {a.n_layers}L/{a.dim}d/{a.n_heads}H, conditioning={a.conditioning}, "
        f"tokenizer={config.tokenizer}; load it with transformers.AutoModel.from_pretrained({args.out_dir!r}, "
        "trust_remote_code=True)"
    )
    print(json.dumps({"out_dir": args.out_dir, "step": config.step, "weights": config.weights}))
    return 0
