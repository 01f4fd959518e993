"""Causal scorers for generation perplexity: an aogpt checkpoint read left to right, or a Hugging Face LM.

They differ in what they can score. An aogpt model has the [None] start slot, so all n tokens of a
sample are scored, the first with no context (read from the start slot). A Hugging Face causal LM such as GPT-2 has no BOS in use
here (as in the authors' and SEDD's scripts), so it scores the n-1 tokens after the first.
"""

from __future__ import annotations

import torch

from ..errors import UserError
from ..library_noise import quiet_library_noise
from ..likelihood import token_nlls

HF_PREFIX = "hf:"
# ordinary text only: how a tokenizer treats the text "<|endoftext|>" does not matter for ids
_PROBE = "Any-order GPT: 3.14 ‘quotes’, émigré, 東京, tabs\tand  spaces,\n\nnew lines."


def _pad(batch: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (pad 0) and the mask of real tokens."""
    length = max(len(ids) for ids in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    mask = torch.zeros(len(batch), length, dtype=torch.bool)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = True
    return ids.to(device), mask.to(device)


def shifted_nll_sums(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row NLL sum and count of tokens 1..L-1 given their prefixes (a causal LM without BOS)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    nll = -logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    keep = mask[:, 1:]
    return (nll * keep).double().sum(1), keep.sum(1)


class AOGPTScorer:
    """A converted aogpt model in left-to-right mode (an AR baseline with conditioning=none, or AO-GPT)."""

    kind = "aogpt"

    def __init__(self, model_dir: str, device, dtype, verify: bool = True):
        from ..model_dir import load_model_dir, read_config

        config = read_config(model_dir)
        self.tokenizer = config.build_tokenizer(model_dir)
        self.vocab_size = config.vocab_size
        self.name = model_dir
        self.weights = config.weights
        self.max_len = config.model_args.max_seq_len
        self.min_len = 1
        self.model = load_model_dir(model_dir, device, dtype, verify=verify).model
        self.device = device

    def speaks(self, tokenizer_name: str) -> bool:
        from ..data.tokenizer import same_tokenizer

        return same_tokenizer(tokenizer_name, self.tokenizer.name)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer.encode_batch(texts)

    @torch.inference_mode()
    def nll_sums(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = _pad(batch, self.device)
        nll = token_nlls(self.model, ids, None)  # causal: padding after a sample cannot change its slots
        return (nll * mask).double().sum(1).cpu(), mask.sum(1).cpu()


class HFScorer:
    """`hf:NAME`: a Hugging Face causal LM by hub name or local path (transformers is imported lazily)."""

    kind = "hf"

    def __init__(self, spec: str, device, dtype, flag: str = "--scorer"):
        transformers = import_transformers(spec, flag)
        transformers.utils.logging.set_verbosity_error()  # one error line, not load banners and bars
        transformers.utils.logging.disable_progress_bar()
        name = spec[len(HF_PREFIX) :]
        try:
            self.hf_tokenizer = transformers.AutoTokenizer.from_pretrained(name)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
        except Exception as e:  # offline, unknown name, not a causal LM
            first_line = str(e).splitlines()[0][:160] if str(e) else ""
            raise UserError(f"{flag} {spec!r} cannot load ({type(e).__name__}: {first_line})") from None
        self.model.to(device).eval()
        self.name = spec
        self.weights = None
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.max_len = hf_positions(self.model.config)
        self.min_len = 2
        self.device = device

    def speaks(self, tokenizer_name: str) -> bool:
        """Same ids as the samples' tokenizer: checked on a probe string, not trusted by name."""
        if tokenizer_name != "gpt2":
            return False
        from ..data.tokenizer import TiktokenTokenizer

        gpt2 = TiktokenTokenizer("gpt2")
        return len(self.hf_tokenizer) == gpt2.get_vocab_size() and self.encode([_PROBE])[0] == gpt2.encode(_PROBE)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.hf_tokenizer(texts)["input_ids"]]

    @torch.inference_mode()
    def nll_sums(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = _pad(batch, self.device)
        logits = self.model(input_ids=ids, attention_mask=mask.long()).logits
        sums, counts = shifted_nll_sums(logits, ids, mask)
        return sums.cpu(), counts.cpu()


def hf_positions(config) -> int:
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 1024


def hf_config_positions(spec: str, flag: str) -> int:
    """Positions of an hf: model from its config alone (before any weights are read)."""
    transformers = import_transformers(spec, flag)
    transformers.utils.logging.set_verbosity_error()
    try:
        return hf_positions(transformers.AutoConfig.from_pretrained(spec[len(HF_PREFIX) :]))
    except Exception as e:  # offline, unknown name
        first_line = str(e).splitlines()[0][:160] if str(e) else ""
        raise UserError(f"{flag} {spec!r} cannot load ({type(e).__name__}: {first_line})") from None


def import_transformers(spec: str, flag: str = "--scorer"):
    # transformers imports torchao when present, which logs its optional CUDA kernels' absence and
    # torch's pytree deprecations: nothing a user of a CPU or a GPT-2 baseline can act on
    quiet_library_noise(torch.cuda.is_available())
    try:
        import transformers
    except ImportError:
        raise UserError(
            f"{flag} {spec!r} needs the `transformers` package, which is not installed (pip install -e '.[eval]')"
        ) from None
    return transformers


def check_scorer_arg(spec: str, flag: str = "--scorer") -> None:
    """Cheap checks before loading anything: the package for hf:, a converted folder otherwise."""
    if spec.startswith(HF_PREFIX):
        if len(spec) == len(HF_PREFIX):
            raise UserError(f"{flag} {spec!r}: give a model after 'hf:', e.g. hf:gpt2-large")
        import_transformers(spec, flag)
        return
    from ..model_dir import read_config

    read_config(spec).build_tokenizer(spec)


def load_scorer(spec: str, device, dtype, verify: bool = True):
    """`verify`: check an aogpt scorer's weights against config.json (model_dir.load_model_dir)."""
    return HFScorer(spec, device, dtype) if spec.startswith(HF_PREFIX) else AOGPTScorer(spec, device, dtype, verify)
