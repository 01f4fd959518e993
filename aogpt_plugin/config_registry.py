"""`--module aogpt_plugin --config NAME` on torchtitan 0.3: its ConfigManager imports this module and
calls NAME(). One function per recipe of train_configs/ (`study_<name>` for train_configs/study/),
each loading its TOML through the 0.3 glue (training/titan03/recipe.py), so the TOML stays the
single source of the values; relative data and tokenizer paths are resolved against the repository
root, where the recipes name them from. Without an accelerator the function first makes torchtitan
run on the CPU (training/titan03/cpu.py), so `torchrun -m torchtitan.train --module aogpt_plugin
--config aogpt_debug` trains on a CPU-only machine too. The config it returns hands the Trainer the shared
preflight (`_preflight` below), which it runs before its process group. Nothing here imports torchtitan itself.
"""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "train_configs")


def recipe(name: str):
    """The AOGPTTrainer.Config of train_configs/<name>.toml (`study/ao_random` for a study recipe)."""
    from .errors import exit_in_one_line_on_user_error
    from .training.text_datasets import register_datasets
    from .training.titan03.cpu import enable_cpu
    from .training.titan03.model import model_registry
    from .training.titan03.recipe import load_recipe
    from .training.titan03.trainer import AOGPTTrainer
    from .training.versions import check_torch_for_titan03

    exit_in_one_line_on_user_error()  # stock torchtitan runs us: one `error:` line, not a traceback per rank
    check_torch_for_titan03()
    enable_cpu()  # without an accelerator: torchtitan on the CPU, as under the launcher
    register_datasets()
    config = load_recipe(os.path.join(RECIPES, f"{name}.toml"), AOGPTTrainer.Config, model_registry, root=ROOT)
    config.preflight = _preflight  # no launcher ran the checks: the Trainer runs them, before its process group
    return config


def _preflight(settings, world_size: int) -> None:
    """The shared checks on the final settings (stock torchtitan applied the command line after `recipe`), and
    a resumed run's first line; a run with nothing left to train ends there (errors.NothingToDo)."""
    from .training.preflight import announce_resume, check_settings
    from .training.titan03.dataset_names import registered_names

    check_settings(settings, world_size, **registered_names())
    announce_resume(settings)


def aogpt_debug():
    return recipe("aogpt_debug")


def aogpt_small():
    return recipe("aogpt_small")


def aogpt_medium():
    return recipe("aogpt_medium")


def aogpt_tiny_from_gpt2():
    """train_configs/aogpt_tiny_from_gpt2.toml (CPU, the study's): give the GPT-2 folder as --checkpoint.initial_load_path."""
    return recipe("aogpt_tiny_from_gpt2")


def aogpt_small_from_gpt2():
    """train_configs/aogpt_small_from_gpt2.toml: give the GPT-2 folder as --checkpoint.initial_load_path HF_DIR."""
    return recipe("aogpt_small_from_gpt2")


def aogpt_medium_from_gpt2():
    """train_configs/aogpt_medium_from_gpt2.toml: give the GPT-2 folder as --checkpoint.initial_load_path HF_DIR."""
    return recipe("aogpt_medium_from_gpt2")


def ar_gpt_medium():
    return recipe("ar_gpt_medium")


def sigma_gpt_medium():
    return recipe("sigma_gpt_medium")


def _study(name: str):
    def config():
        return recipe(f"study/{name}")

    config.__name__ = config.__qualname__ = f"study_{name}"
    config.__doc__ = f"train_configs/study/{name}.toml"
    return config


_STUDY = os.path.join(RECIPES, "study")
for _file in sorted(os.listdir(_STUDY)) if os.path.isdir(_STUDY) else ():
    if _file.endswith(".toml"):
        globals()[f"study_{_file[:-5]}"] = _study(_file[:-5])
