"""Exponential moving average of the weights, kept inside the model as `ema.<param name>` buffers.

Why buffers of a child module: torchtitan's checkpointer saves the model state dict in every
checkpoint, including the model-only one it writes at the last step, so the EMA weights travel by
parameter name (not as the authors' positional list) and `aogpt convert --weights ema` works on
any checkpoint. Each shadow is a float32 copy of the parameter *as the optimizer sees it*: with
FSDP2 that is the local shard (a DTensor), so EMA stays sharded and costs 1x sharded params.
The shadows are not parameters, so the optimizer, grad clipping and FSDP all-gathers ignore them.

Lifecycle in training: parallelize.py attaches the EMA to the (meta-device) model after FSDP
wrapping; when the optimizers are built (after `init_weights`, before a checkpoint loads) `reset()`
starts the average at the initial weights and an optimizer step post-hook calls `update()` after
every step (optimizers.py). The model itself knows nothing of it.
"""

from __future__ import annotations

import contextlib
import re
import weakref

import torch
import torch.nn as nn

_WRAPPER_PARTS = re.compile(r"(^|\.)(_orig_mod|_checkpoint_wrapped_module|_fsdp_wrapped_module)(?=\.|$)")


def clean_fqn(name: str) -> str:
    """Parameter name without torch.compile / activation-checkpoint wrapper segments."""
    return _WRAPPER_PARTS.sub("", name).lstrip(".")


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (FSDP2), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


class EMA(nn.Module):
    """Holds the shadows; `update()` after every optimizer step, `swapped()` to evaluate with them."""

    def __init__(self, model: nn.Module, decay: float = 0.9999, warmup: bool = True):
        super().__init__()
        self.decay, self.warmup = decay, warmup
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.int64))
        # its value on the host, so an update reads nothing from the device; None after a load (read then)
        self._updates: int | None = 0
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_updates", None))
        # The model is looked up through a weak reference (it owns this module) and the tensors by
        # name at every use: moving the model (to_empty, .to) replaces buffer objects.
        self._model = weakref.ref(model)
        self._names: list[tuple[str, str]] = []  # (parameter name in the model, shadow name here)
        # FSDP2 keeps some groups unsharded between no-grad forwards (e.g. the final norm + head):
        # swapping must reshard them so the next forward all-gathers the swapped-in values.
        self._fsdp_modules = [m for m in model.modules() if hasattr(m, "reshard") and hasattr(m, "unshard")]
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            shadow_name = clean_fqn(name)
            owner, leaf = self._owner(shadow_name)
            owner.register_buffer(leaf, p.detach().to(torch.float32, copy=True))
            self._names.append((name, shadow_name))

    def _owner(self, fqn: str) -> tuple[nn.Module, str]:
        *path, leaf = fqn.split(".")
        mod: nn.Module = self
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, nn.Module())
            mod = getattr(mod, part)
        return mod, leaf

    def _pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(parameter, shadow) pairs as registered now. FSDP2 registers its unsharded tensors while a
        group is gathered (their storage is freed on reshard), so every group is resharded first and
        the sharded parameters -- the ones the optimizer steps -- are what is paired."""
        self._reshard()
        model = self._model()
        return [(model.get_parameter(p), self.get_buffer(s)) for p, s in self._names]

    @torch.no_grad()
    def reset(self) -> None:
        """Start the average at the current weights (after the model's weights are initialised)."""
        self.num_updates.zero_()
        self._updates = 0
        for p, s in self._pairs():
            local_tensor(s).copy_(local_tensor(p))

    def updates(self) -> int:
        """`num_updates` as the host knows it (read from the device once after a checkpoint loaded)."""
        if self._updates is None:
            self._updates = int(self.num_updates.item())
        return self._updates

    def current_decay(self) -> float:
        if not self.warmup:
            return self.decay
        k = self.updates()
        return min(self.decay, (1 + k) / (10 + k))

    @torch.no_grad()
    def update(self) -> None:
        self._updates = self.updates() + 1
        self.num_updates += 1
        weight = 1.0 - self.current_decay()
        pairs = self._pairs()
        shadows = [local_tensor(s) for _, s in pairs]
        params = [local_tensor(p).float() for p, _ in pairs]
        torch._foreach_lerp_(shadows, params, weight)

    def _reshard(self) -> None:
        for module in self._fsdp_modules:
            module.reshard()

    @contextlib.contextmanager
    def swapped(self):
        """Temporarily load the shadows into the model's parameters (restores the raw weights after)."""
        pairs = self._pairs()
        saved = []
        with torch.no_grad():
            for p, s in pairs:
                lp = local_tensor(p)
                saved.append(lp.clone())
                lp.copy_(local_tensor(s))
        try:
            yield
        finally:
            with torch.no_grad():
                for (p, _), raw in zip(pairs, saved, strict=True):
                    local_tensor(p).copy_(raw)
            self._reshard()


def attach_ema(model: nn.Module, decay: float, warmup: bool = True) -> EMA:
    """Create the EMA from the current weights and register it as `model.ema`."""
    if hasattr(model, "ema"):
        raise RuntimeError("model already has an `ema` attribute")
    ema = EMA(model, decay=decay, warmup=warmup)
    model.add_module("ema", ema)
    return ema
