"""Every bad config value fails with one line naming key, value and what is allowed (in-process)."""

from __future__ import annotations

import glob

import pytest
import torch

from aogpt_plugin.errors import ConfigError, UserError
from aogpt_plugin.training.titan022.launch import enable_torchtitan_on_cpu

enable_torchtitan_on_cpu()

import aogpt_plugin  # noqa: E402
from aogpt_plugin.training.preflight import check_settings  # noqa: E402
from aogpt_plugin.training.titan022.config_parser import parse_job_config, registered_names  # noqa: E402
from aogpt_plugin.training.titan022.settings import run_settings  # noqa: E402

aogpt_plugin.register()
DEBUG = ["--job.config_file", "train_configs/aogpt_debug.toml"]


@pytest.fixture(scope="module")
def study_tokenizer(tmp_path_factory):
    """The text-track study recipes name the tokenizer the study trains first; a small one stands in."""
    from conftest import HELDOUT

    from aogpt_plugin.data.tokenizer_training import train_tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_tokenizer(str(HELDOUT), 300, str(path), max_bytes=100_000)
    return str(path)


@pytest.mark.parametrize(
    "recipe", sorted(glob.glob("train_configs/*.toml")) + sorted(glob.glob("train_configs/study/*.toml"))
)
def test_every_recipe_parses_with_torchtitans_config_manager(recipe, study_tokenizer, tmp_path):
    extra = ["--aogpt.tokenizer", study_tokenizer] if "outputs/study/tokenizer.json" in open(recipe).read() else []
    extra += ["--job.dump_folder", str(tmp_path)]  # not the recipe's: after `make findings` it holds the study's run
    config = parse_job_config(["--job.config_file", recipe, *extra])
    assert config.model.name == "aogpt"
    assert config.experimental.custom_import == "aogpt_plugin"
    assert config.job.custom_config_module == "aogpt_plugin.training.job_config"
    if config.checkpoint.initial_load_in_hf:  # the *_from_gpt2 recipes: the GPT-2 folder is the user's to give
        with pytest.raises(ConfigError, match="set checkpoint.initial_load_path=HF_DIR"):
            check_settings(run_settings(config), **registered_names())
        return
    check_settings(run_settings(config), **registered_names())


def test_gpu_recipes_resolve_aogpt_through_custom_import():
    import torchtitan.protocols.train_spec as ts

    config = parse_job_config(["--job.config_file", "train_configs/aogpt_medium.toml"])
    spec = ts.get_train_spec(config.model.name)
    assert spec.model_args["medium"].dim == 1024 and spec.model_args["medium"].n_layers == 24


def test_debug_recipe_spells_out_every_aogpt_option():
    import dataclasses
    import tomllib

    from aogpt_plugin.training.sections import AOGPT, EMA

    with open("train_configs/aogpt_debug.toml", "rb") as f:
        toml = tomllib.load(f)
    assert set(toml["aogpt"]) == {f.name for f in dataclasses.fields(AOGPT)}
    assert set(toml["ema"]) == {f.name for f in dataclasses.fields(EMA)}


def test_cli_overrides_reach_the_aogpt_sections():
    config = parse_job_config(DEBUG + ["--aogpt.order", "blockwise:4", "--aogpt.p_l2r", "0.25", "--ema.decay", "0.5"])
    assert (config.aogpt.order, config.aogpt.p_l2r, config.ema.decay) == ("blockwise:4", 0.25, 0.5)


@pytest.mark.parametrize(
    "override, message",
    [
        (["--aogpt.p_l2r", "1.5"], "aogpt.p_l2r=1.5 is outside the allowed range [0, 1]"),
        (["--aogpt.p_l2r", "-0.1"], "aogpt.p_l2r=-0.1 is outside the allowed range [0, 1]"),
        (
            ["--aogpt.order", "zigzag"],
            "aogpt.order='zigzag' is not supported; allowed: mixture, random, l2r, fixed_random, blockwise:K",
        ),
        (["--aogpt.order", "blockwise:0"], "aogpt.order='blockwise:0': blockwise needs a positive block size"),
        (
            ["--model.flavor", "huge"],
            "model.flavor='huge' is not an aogpt flavor; allowed: debugmodel, tiny, mini, small, medium",
        ),
        (["--aogpt.conditioning", "film"], "aogpt.conditioning='film' is not supported; allowed: adaln, concat, none"),
        (
            ["--training.seq_len", "4096"],
            "training.seq_len=4096 is outside the positions of model.flavor='debugmodel'; allowed: 1..256",
        ),
        (["--training.seq_len", "0"], "training.seq_len=0 is outside the positions of model.flavor='debugmodel'"),
        (["--validation.seq_len", "300"], "validation.seq_len=300 is outside the positions"),
        (["--training.dataset_path", "/no/such/dir"], "training.dataset_path='/no/such/dir' does not exist"),
        (["--training.dataset", "c4_nope"], "training.dataset='c4_nope' is not registered; allowed:"),
        (["--validation.steps", "-1"], "validation.steps=-1 is not allowed; allowed: >= 1"),
        (["--training.local_batch_size", "0"], "training.local_batch_size=0 is not allowed; allowed: >= 1"),
        (["--training.steps", "0"], "training.steps=0 is not allowed; allowed: >= 1"),
        (["--optimizer.lr", "-1"], "optimizer.lr=-1.0 is not allowed; allowed: > 0"),
        (["--optimizer.name", "SGD"], "optimizer.name='SGD' is not supported; allowed: Adam, AdamW"),
        (["--optimizer.beta2", "1.5"], "optimizer.beta2=1.5 is outside the allowed range [0, 1)"),
        (["--model.converters", "float8"], "model.converters: 'float8' is not a converter; allowed: "),
        (["--checkpoint.interval", "0"], "checkpoint.interval=0 is not allowed; allowed: >= 1"),
        (
            ["--checkpoint.keep_latest_k", "1"],
            "checkpoint.keep_latest_k=1 is not allowed; allowed: 0 (keep all) or >= 2",
        ),
        (["--parallelism.tensor_parallel_degree", "2"], "parallelism.tensor_parallel_degree=2 is not supported"),
        (["--parallelism.context_parallel_degree", "2"], "parallelism.context_parallel_degree=2 is not supported"),
        (["--parallelism.pipeline_parallel_degree", "2"], "parallelism.pipeline_parallel_degree=2 is not supported"),
        (["--aogpt.p_l2r", "abc"], "--aogpt.p_l2r='abc' has the wrong type; allowed: a number"),
        (["--training.steps", "ten"], "--training.steps='ten' has the wrong type; allowed: an integer"),
        (["--ema.decay", "1.0"], "ema.decay=1.0 is outside the allowed range [0, 1)"),
        (
            ["--aogpt.tokenizer", "cl100k"],
            "aogpt.tokenizer='cl100k' is not a tokenizer; allowed: gpt2, a tokenizer.json path, symbols:V",
        ),
        (["--aogpt.tokenizer", "/no/tok.json"], "aogpt.tokenizer='/no/tok.json': no such tokenizer.json"),
        (["--aogpt.target_pe_dim", "0"], "aogpt.target_pe_dim=0 must be >= 1"),
        (["--training.dataset_path", "/no/such/*.jsonl"], "training.dataset_path='/no/such/*.jsonl' matches no files"),
        (["--training.dataset_path", "../shared/data/train_corpus"], "includes the validation file"),
    ],
)
def test_bad_values_raise_one_line_config_errors(override, message):  # parsing errors are one line too
    with pytest.raises(ConfigError) as info:
        check_settings(run_settings(parse_job_config(DEBUG + override)), **registered_names())
    text = str(info.value)
    assert message in text and "\n" not in text


F8 = ["--model.converters", "quantize.linear.float8"]


@pytest.mark.parametrize(
    "override, message",
    [
        (
            [*F8, "--quantize.linear.float8.emulate", "--compile.enable"],
            "quantize.linear.float8.emulate=true runs eager only; allowed with it: compile.enable=false",
        ),
        (
            [*F8, "--quantize.linear.float8.emulate", "--quantize.linear.float8.recipe_name", "rowwise"]
            + ["--quantize.linear.float8.enable_fsdp_float8_all_gather"],
            "quantize.linear.float8.recipe_name='rowwise' with enable_fsdp_float8_all_gather=true is not supported",
        ),
        pytest.param(
            F8,
            "model.converters=['quantize.linear.float8'] needs an NVIDIA GPU of compute capability >= 8.9 (none here)",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine may run float8"),
        ),
    ],
)
def test_float8_settings_the_converter_would_refuse_are_one_line(override, message):
    """Refused before the process group, on both torchtitan versions (the rule is shared)."""
    with pytest.raises(ConfigError) as info:
        check_settings(run_settings(parse_job_config(DEBUG + override)), **registered_names())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_emulated_float8_passes_the_preflight():  # the case the rules above must not refuse
    check_settings(
        run_settings(parse_job_config(DEBUG + [*F8, "--quantize.linear.float8.emulate"])), **registered_names()
    )


def test_unknown_toml_key_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(open("train_configs/aogpt_debug.toml").read().replace("[aogpt]\n", "[aogpt]\nnot_a_key = 1\n"))
    with pytest.raises(ConfigError) as info:
        parse_job_config(["--job.config_file", str(bad)])
    assert "not_a_key" in str(info.value) and "\n" not in str(info.value)


def _only_error(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_job_config(argv)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    "override, message",
    [
        (["--training.stepz", "3"], "unknown option --training.stepz; did you mean --training.steps?"),
        (["--trainng.steps", "3"], "unknown option --trainng.steps; did you mean --training.steps?"),
        (["--zzz", "3"], "unknown option --zzz; see --help"),
        (
            ["--training.stepz", "3", "--aogpt.orderr", "l2r", "--compile.enabel"],
            "unknown options --training.stepz (did you mean --training.steps?), --aogpt.orderr (did you mean "
            "--aogpt.order?), --compile.enabel (did you mean --compile.enable?); see --help",
        ),
    ],
)
def test_unknown_cli_options_are_all_named_with_the_nearest_valid_one(override, message):
    """tyro's one-line summary was 'Unrecognized options', naming none of them."""
    assert _only_error(DEBUG + override) == message


@pytest.mark.parametrize(
    "override, message",
    [
        (["--training.steps", "abc"], "--training.steps='abc' has the wrong type; allowed: an integer"),
        (["--training.steps=abc"], "--training.steps='abc' has the wrong type; allowed: an integer"),
        (["--optimizer.lr", "fast"], "--optimizer.lr='fast' has the wrong type; allowed: a number"),
        (["--checkpoint.load_step", "last"], "--checkpoint.load_step='last' has the wrong type; allowed: an integer"),
        (["--training.dtype", "fp8"], "--training.dtype='fp8' is not allowed; allowed: one of 'bfloat16', 'float32'"),
        (["--training.steps"], "--training.steps needs a value; allowed: an integer"),
        (
            ["--compile.enable", "False"],
            "--compile.enable is a flag and takes no value (got 'False'); "
            "allowed: --compile.enable or --compile.no_enable",
        ),
    ],
)
def test_bad_cli_values_name_option_value_and_type(override, message):
    """tyro's message was cut at its box's line width, before the value."""
    assert _only_error(DEBUG + override) == message


def test_what_only_tyro_catches_keeps_its_whole_first_part():
    """The summary line was the box title alone ('Unrecognized options'), not what was unrecognized."""
    assert _only_error(DEBUG + ["--training.steps", "3", "stray"]) == "Unrecognized options: stray"


@pytest.mark.parametrize(
    "override",
    [
        ["--training.seq-len", "64", "--training.steps=3"],
        ["--compile.no-enable", "--compile.no_enable", "--checkpoint.load_step", "-1"],
        ["--lr_scheduler.decay_ratio", "None", "--model.converters", "quantize.linear.float8"],
        ["--quantize.linear.float8.emulate", "--validation.no_enable"],
    ],
)
def test_valid_cli_spellings_still_parse(override):
    parse_job_config(DEBUG + override)


def _toml_with(tmp_path, *edits: tuple[str, str]) -> str:
    text = open("train_configs/aogpt_debug.toml").read()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "typo.toml"
    path.write_text(text)
    return str(path)


def test_every_unknown_toml_key_is_named_with_its_section_and_the_nearest_key(tmp_path):
    """torchtitan named a Python class, suggested nothing and stopped at the first of the typos."""
    path = _toml_with(tmp_path, ("[training]\n", "[training]\nstepz = 3\n"), ("[aogpt]\n", '[aogpt]\norderr = "l2r"\n'))
    assert _only_error(["--job.config_file", path]) == (
        f"unknown keys in {path}: [aogpt] orderr (did you mean order?), [training] stepz (did you mean steps?)"
    )


def test_unknown_toml_sections_and_stray_keys_are_named(tmp_path):
    path = _toml_with(tmp_path, ("[validation]", "[validaton]"), ("[job]", "stray = 1\n[job]"))
    message = _only_error(["--job.config_file", path])
    assert message.startswith(f"unknown keys in {path}: ")
    assert "stray (a key outside any section)" in message
    assert "[validaton] (unknown section; did you mean [validation]?)" in message


def test_nested_toml_sections_are_checked(tmp_path):
    path = _toml_with(tmp_path, ("[training]", "[quantize.linear.float8]\nemulat = true\n\n[training]"))
    assert _only_error(["--job.config_file", path]) == (
        f"unknown key in {path}: [quantize.linear.float8] emulat (did you mean emulate?)"
    )


def test_aogpt_sections_without_the_custom_config_module_say_which_module(tmp_path):
    path = _toml_with(tmp_path, ('custom_config_module = "aogpt_plugin.training.job_config"', ""))
    message = _only_error(["--job.config_file", path])
    assert "[aogpt] (unknown section; set [job] custom_config_module = 'aogpt_plugin.training.job_config')" in message
    assert "[ema] (unknown section; set [job] custom_config_module = 'aogpt_plugin.training.job_config')" in message


def test_recipes_naming_the_old_custom_config_module_still_parse(tmp_path):
    """`aogpt_plugin.job_config` is what recipes named before the training side moved to training/."""
    old = 'custom_config_module = "aogpt_plugin.job_config"'
    path = _toml_with(tmp_path, ('custom_config_module = "aogpt_plugin.training.job_config"', old))
    config = parse_job_config(["--job.config_file", path])
    check_settings(run_settings(config), **registered_names())
    assert config.job.custom_config_module == "aogpt_plugin.job_config" and config.aogpt.order == "mixture"


def test_the_sections_named_in_config_messages_are_the_job_configs_fields():
    import dataclasses

    from aogpt_plugin.training.config_checks import AOGPT_SECTIONS
    from aogpt_plugin.training.job_config import JobConfig

    assert AOGPT_SECTIONS == tuple(f.name for f in dataclasses.fields(JobConfig))


def test_an_unimportable_custom_config_module_is_one_line():
    """It was an ImportError traceback."""
    assert _only_error(DEBUG + ["--job.custom_config_module", "no_such.module"]) == (
        "job.custom_config_module: No module named 'no_such'; allowed: 'aogpt_plugin.training.job_config'"
    )


def test_glob_dataset_path_selects_only_the_training_shards():
    from aogpt_plugin.data.text_files import list_text_files

    files = list_text_files("../shared/data/train_corpus/enwiki2015_train_*.jsonl")
    assert len(files) == 5 and not any("heldout" in f for f in files)


@pytest.mark.parametrize(
    ("line", "replacement", "message"),
    [
        ("p_l2r = 0.1 ", 'p_l2r = "abc" ', "aogpt.p_l2r='abc' has the wrong type; allowed: a number"),
        ("steps = 60", 'steps = "abc"', "training.steps='abc' has the wrong type; allowed: an integer"),
        ("enable = true", 'enable = "yes"', "has the wrong type; allowed: true/false"),
    ],
)
def test_toml_values_of_the_wrong_type_are_one_line(tmp_path, line, replacement, message):
    """The CLI library checks CLI values; TOML values reached the trainer and failed with a traceback."""
    text = open("train_configs/aogpt_debug.toml").read()
    assert line in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(line, replacement, 1))
    with pytest.raises(ConfigError) as info:
        check_settings(run_settings(parse_job_config(["--job.config_file", str(bad)])), **registered_names())
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "is empty"),
        ("notext.jsonl", b'{"title": "x", "body": "y"}\n', "notext.jsonl:1 is not a JSON object with a 'text' field"),
        ("garbage.jsonl", b"this is not json\n", "garbage.jsonl:1 is not a JSON object with a 'text' field"),
        ("number.jsonl", b'{"text": 5}\n', "number.jsonl:1 has a 'text' that is not a string (int)"),
        ("binary.txt", bytes(range(256)) * 4, "binary.txt' is not UTF-8 text"),
        ("blank.jsonl", b'{"text": " "}\n', "holds no text in its first"),
    ],
)
@pytest.mark.parametrize("section", ["training", "validation"])
def test_bad_data_files_are_one_line_before_any_process_group(tmp_path, name, content, message, section):
    (tmp_path / name).write_bytes(content)
    config = parse_job_config(DEBUG + [f"--{section}.dataset_path", str(tmp_path / name)])
    with pytest.raises(ConfigError) as info:
        check_settings(run_settings(config), **registered_names())
    assert message in str(info.value) and f"{section}.dataset_path" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_prepared_folder_is_verified_against_its_manifest_unless_told_not_to(tmp_path):
    """Before any process group: a shard changed at its size is one line naming it (data/manifest.py)."""
    import json

    from aogpt_plugin.cli import main

    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} of the corpus"}) + "\n" for i in range(30)))
    folder = tmp_path / "prepared"
    assert main(["data", "prepare", str(src), str(folder), "--shard-docs", "10"]) == 0
    shard = folder / "shard-00000.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b"document 3 ", b"document 8 "))  # valid JSON, same size
    argv = DEBUG + ["--training.dataset_path", str(folder), "--job.dump_folder", str(tmp_path / "run")]
    with pytest.raises(ConfigError, match="shard shard-00000.jsonl does not match the sha256"):
        check_settings(run_settings(parse_job_config(argv)), **registered_names())
    check_settings(run_settings(parse_job_config(argv + ["--aogpt.no-verify-data"])), **registered_names())


@pytest.mark.parametrize("what", ["checkpoint_file", "dump_device"])
def test_a_dump_or_checkpoint_folder_that_is_not_a_folder_is_one_line(tmp_path, what):
    """Reported: a dump folder whose `checkpoint` was a user's file trained, then died at the first save."""
    if what == "checkpoint_file":
        dump = tmp_path / "run"
        dump.mkdir()
        (dump / "checkpoint").write_text("the user's notes")
        key, path, kind = "checkpoint.folder", f"{dump}/checkpoint", "a file"
    else:
        dump, key, path, kind = "/dev/null", "job.dump_folder", "/dev/null", "a character device"
    with pytest.raises(ConfigError) as info:
        check_settings(run_settings(parse_job_config(DEBUG + ["--job.dump_folder", str(dump)])), **registered_names())
    assert str(info.value).startswith(f"{key}: {path!r} is {kind}, not a folder; checkpoints and logs are written")


# ---- a GPT-2 folder to start from (initial_load_in_hf) -------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A GPT-2 of gpt2-tiny's shapes, saved by transformers."""
    pytest.importorskip("transformers")
    from conftest import GPT2_TINY_FLAVOR, tiny_gpt2

    path = tmp_path_factory.mktemp("gpt2") / "hf"
    tiny_gpt2(path, **GPT2_TINY_FLAVOR)
    return path


def _start_from(folder, tmp_path, *extra: str) -> list[str]:
    argv = [*DEBUG, "--job.dump_folder", str(tmp_path / "run"), "--model.flavor", "gpt2-tiny"]
    argv += ["--training.seq_len", "32", "--validation.seq_len", "32"]
    return [*argv, "--checkpoint.initial_load_path", str(folder), "--checkpoint.initial_load_in_hf", *extra]


def _edited(folder, tmp_path, **config):
    """A copy of `folder` whose config.json says otherwise (its weights still the original's: never read)."""
    import json
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    values = json.loads((copy / "config.json").read_text()) | config
    (copy / "config.json").write_text(json.dumps(values))
    return copy


def test_the_gpt2_folder_of_the_flavor_passes(gpt2_folder, tmp_path):
    check_settings(run_settings(parse_job_config(_start_from(gpt2_folder, tmp_path))), **registered_names())


@pytest.mark.parametrize(
    "config, extra, message",
    [
        ({"n_layer": 2}, [], "has layers n_layer=2 but model.flavor='gpt2-tiny' has n_layers=4"),
        ({"n_embd": 64}, [], "has width n_embd=64 but model.flavor='gpt2-tiny' has dim=128"),
        ({"n_head": 8}, [], "has heads n_head=8 but model.flavor='gpt2-tiny' has n_heads=4"),
        (
            {"vocab_size": 50000},
            [],
            "vocabulary vocab_size=50000 but model.flavor='gpt2-tiny' has vocab_size \\(the tokenizer's\\)=50257",
        ),
        (
            {"n_positions": 1024},
            [],
            "positions n_positions=1024 but model.flavor='gpt2-tiny' has max_seq_len \\+ 1 .*=256",
        ),
        (
            {"bos_token_id": 0},
            [],
            "begins texts with token 0 \\(bos_token_id\\) but aogpt.tokenizer='gpt2' ends them with 50256",
        ),
        (
            {},
            ["--model.flavor", "debugmodel"],
            "needs GPT-2's backbone but model.flavor='debugmodel' has norm='rmsnorm'",
        ),
        ({}, ["--checkpoint.no-enable"], "checkpoint.initial_load_in_hf=true is read only with checkpoint.enable=true"),
        ({}, ["--checkpoint.no-initial_load_model_only"], "initial_load_model_only=false is not allowed"),
        (
            {},
            ["--checkpoint.last_save_in_hf"],
            "checkpoint.last_save_in_hf=true is not allowed with model.flavor='gpt2-tiny'",
        ),
        (
            {},
            ["--checkpoint.initial_load_path", ""],
            "reads a GPT-2 folder: set checkpoint.initial_load_path=HF_DIR",
        ),
    ],
)
def test_a_gpt2_folder_that_does_not_fit_the_run_is_one_line(gpt2_folder, tmp_path, config, extra, message):
    folder = _edited(gpt2_folder, tmp_path, **config) if config else gpt2_folder
    with pytest.raises(ConfigError, match=message) as e:
        check_settings(run_settings(parse_job_config(_start_from(folder, tmp_path, *extra))), **registered_names())
    assert "\n" not in str(e.value)


def test_a_gpt2_folder_is_opened_before_any_process_group(gpt2_folder, tmp_path):
    """Damaged weights are found while the files are opened (names and shapes), in the preflight."""
    from safetensors.torch import load_file, save_file

    folder = _edited(gpt2_folder, tmp_path)
    state = load_file(folder / "model.safetensors")
    state.pop("transformer.h.3.mlp.c_proj.weight")
    save_file(state, folder / "model.safetensors")
    with pytest.raises(UserError, match="lacks 'transformer.h.3.mlp.c_proj.weight'"):
        check_settings(run_settings(parse_job_config(_start_from(folder, tmp_path))), **registered_names())


def test_a_missing_shared_data_folder_is_named_as_such_by_training(tmp_path, monkeypatch):
    """Reported: a checkout without ../shared beside it trained into `training.dataset_path=... matches no files`.
    The recipe's data is the shared data folder beside the checkout, and the line says so, before any process."""
    from conftest import ROOT

    from aogpt_plugin.data import text_files

    beside = tmp_path / "shared" / "data"
    (tmp_path / "repo").mkdir()
    monkeypatch.setattr(text_files, "BESIDE_THE_CHECKOUT", str(beside))
    monkeypatch.chdir(tmp_path / "repo")
    config = parse_job_config(["--job.config_file", str(ROOT / "train_configs" / "aogpt_debug.toml")])
    with pytest.raises(ConfigError, match="^the shared data folder beside the checkout is missing: looked for ") as e:
        check_settings(run_settings(config), **registered_names())
    assert str(beside) in str(e.value) and "training.dataset_path='../shared/data/train_corpus/" in str(e.value)


def test_an_initial_load_0_2_2_would_skip_for_an_incomplete_checkpoint_folder_is_one_line(tmp_path):
    """torchtitan 0.2.2 reads --checkpoint.initial_load_path only when the checkpoint folder does not exist: with a
    folder holding no complete checkpoint (a first save killed part-way) it would start from random weights."""
    (tmp_path / "run" / "checkpoint" / "step-2").mkdir(parents=True)  # no .metadata: not complete
    args = ["--job.dump_folder", str(tmp_path / "run"), "--checkpoint.initial_load_path", str(tmp_path / "w")]
    with pytest.raises(ConfigError, match=r"checkpoint.initial_load_path='.*/w' would not be read: '.*/checkpoint' "):
        check_settings(run_settings(parse_job_config(DEBUG + args)), **registered_names())
    check_settings(run_settings(parse_job_config(DEBUG + args[:2])), **registered_names())  # no initial load: fine
