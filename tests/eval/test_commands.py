"""`aogpt eval ppl|genppl|data` (the command group of eval/__init__.py) end to end on tiny models saved
with save_pretrained, through `aogpt_plugin.cli.main`: JSON fields against a direct computation, seeding, and one-line errors."""

import json
import math

import pytest
import torch
from conftest import tiny_model

from aogpt_plugin import cli
from aogpt_plugin.eval.ensemble import ensemble_nll, member_nlls
from aogpt_plugin.eval.perplexity import base_order
from aogpt_plugin.likelihood import token_nlls
from aogpt_plugin.model_dir import load_model_dir, save_model

GPT2_VOCAB = 50257
SEQ = 24  # the saved models' positions


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tiny-gpt2"
    model = tiny_model(vocab_size=GPT2_VOCAB, max_seq_len=SEQ, dim=32, scale=5.0, preset="eval")
    save_model(model, str(path), step=7, weights="ema")
    return str(path)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "docs.txt"
    paragraphs = [f"Document {i}: the quick brown fox number {i * 7} jumps over {i} lazy dogs." for i in range(12)]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return str(path)


def run_json(capsys, argv: list[str]) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, "stdout holds only the JSON object"
    return json.loads(out[0])


def run_error(capsys, argv: list[str]) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse usage errors exit from the parser, also with one line and status 2
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def chunks_of(record_tokens: int, model_dir, text_file, seq_len, count):
    from aogpt_plugin.data.tokenizer import TiktokenTokenizer
    from aogpt_plugin.eval.benchmarks import load_documents, pack_documents

    packed = pack_documents(load_documents(text_file).texts, TiktokenTokenizer("gpt2"), seq_len)
    assert packed.tokens == record_tokens
    return packed.chunks[:count]


def test_ppl_l2r_json_matches_a_direct_computation(capsys, model_dir, text_file):
    rec = run_json(capsys, ["eval", "ppl", "--model", model_dir, "--dataset", text_file, "--order", "l2r"])
    assert rec["seq_len"] == SEQ and rec["max_chunks"] is None and rec["chunks"] == rec["dataset_chunks"] >= 3
    assert rec["tokens"] == rec["chunks"] * SEQ
    assert (rec["weights"], rec["step"], rec["orders"], rec["M"], rec["seed"]) == ("ema", 7, 1, 1, 0)
    assert rec["nll_se_orders"] == 0.0
    chunks = chunks_of(rec["dataset_tokens"], model_dir, text_file, SEQ, rec["chunks"])
    model = load_model_dir(model_dir).model
    nll = token_nlls(model, chunks, None).double().mean().item()
    assert rec["nll"] == pytest.approx(nll, rel=1e-6)
    assert rec["ppl"] == pytest.approx(math.exp(nll), rel=1e-6)


def test_ppl_random_orders_with_ensemble_and_max_chunks(capsys, model_dir, text_file):
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", text_file, "--order", "random"]
    argv += ["--orders", "3", "--ensemble", "4", "--max-chunks", "2", "--seq-len", "12", "--seed", "5"]
    rec = run_json(capsys, argv)
    assert (rec["chunks"], rec["tokens"], rec["max_chunks"], rec["orders"], rec["M"]) == (2, 24, 2, 3, 4)
    assert [e["M"] for e in rec["ensemble"]] == [1, 2, 4]
    assert rec["nll_se_orders"] > 0 and rec["nll"] == rec["ensemble"][-1]["nll"]
    cost = rec["forward_slots"]
    assert cost["authors"] == 2 * 3 * ((12 + 1) + 3 * 12 * 13) and cost["saving"] > 1.5
    # the same numbers from the library, chunk by chunk and order by order
    chunks = chunks_of(rec["dataset_tokens"], model_dir, text_file, 12, 2)
    model = load_model_dir(model_dir).model
    per_pair = []
    for c in range(2):
        for k in range(3):
            sigma = base_order("random", 12, 5, c, k)
            base = token_nlls(model, chunks[c : c + 1], sigma[None])[0]
            nll = member_nlls(model, chunks[c], sigma, base, 4, (5, c, k), 10_000)
            per_pair.append([ensemble_nll(nll, m).mean().item() for m in (1, 2, 4)])
    want = torch.tensor(per_pair).mean(0)
    got = [e["nll"] for e in rec["ensemble"]]
    assert got == pytest.approx(want.tolist(), rel=1e-6)
    # the batch size changes only float32 rounding: every (chunk, order) keeps its orders
    rerun = run_json(capsys, [*argv, "--batch-size", "1"])
    assert [e["nll"] for e in rerun["ensemble"]] == pytest.approx(got, rel=1e-6)
    one_member = [*argv[:-4], "--seq-len", "12", "--ensemble", "1", "--seed"]  # the last --ensemble wins
    assert run_json(capsys, [*one_member, "5"])["nll"] == pytest.approx(got[0], rel=1e-6)
    assert run_json(capsys, [*one_member, "6"])["nll"] != pytest.approx(got[0], rel=1e-6)


def test_ppl_prints_the_chunk_limit_and_cost(capsys, model_dir, text_file):
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", text_file, "--order", "l2r", "--ensemble", "2"]
    assert cli.main([*argv, "--max-chunks", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "(--max-chunks 1)" in out and "the authors' way" in out and "M=2" in out
    assert cli.main([*argv, "--no-progress"]) == 0
    assert "all: no --max-chunks" in capsys.readouterr().out


def test_seeded_runs_are_identical(capsys, model_dir, text_file):
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", text_file, "--order", "random", "--orders", "2"]
    a, b = run_json(capsys, argv), run_json(capsys, argv)
    for key in ("nll", "ppl", "nll_se_orders", "nll_se_chunks", "tokens"):
        assert a[key] == b[key]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dataset", "wikitext7"], "is neither a benchmark"),
        (["--dataset", "/no/such/file.txt"], "is neither a benchmark"),
        (["--ensemble", "0"], "--ensemble 0: the ensemble size M must be >= 1"),
        (["--orders", "0"], "--orders 0"),
        (["--seq-len", str(SEQ + 1)], f"--seq-len {SEQ + 1} is above the {SEQ} positions"),
        (["--split", "train", "--dataset", "ptb"], "--split 'train' does not exist for ptb"),
        (["--orders", "2", "--order", "l2r"], "needs --order random"),
    ],
)
def test_ppl_bad_arguments_are_one_line_errors(capsys, model_dir, text_file, extra, message):
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", text_file, "--order", "random"]
    assert message in run_error(capsys, argv + extra)


def test_ppl_missing_model_and_unknown_order_are_one_line_errors(capsys, tmp_path, text_file):
    msg = run_error(
        capsys, ["eval", "ppl", "--model", str(tmp_path / "nope"), "--dataset", text_file, "--order", "l2r"]
    )
    assert "does not exist" in msg
    assert "invalid choice" in run_error(capsys, ["eval", "ppl", "--model", "x", "--dataset", "ptb", "--order", "r2l"])


def test_ppl_rejects_a_model_whose_vocabulary_is_not_its_tokenizers(capsys, tmp_path, text_file):
    path = tmp_path / "vocab97"
    save_model(tiny_model(vocab_size=97, max_seq_len=SEQ, dim=32, preset="eval"), str(path))
    msg = run_error(capsys, ["eval", "ppl", "--model", str(path), "--dataset", text_file, "--order", "l2r"])
    assert "97-token vocabulary" in msg


def sampler_json(path, tokens, text=None, **extra) -> str:
    record = {"tokenizer": "gpt2", "tokens": tokens, **extra}
    if text is not None:
        record["text"] = text
    path.write_text(json.dumps(record), encoding="utf-8")
    return str(path)


def test_genppl_sampler_json_scored_directly(capsys, tmp_path, model_dir):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, GPT2_VOCAB, (3, SEQ), generator=g)
    ids[1, :12] = 464  # a repetitive sample: lower unigram entropy
    path = sampler_json(tmp_path / "s.json", ids.tolist(), ["unused"] * 3, temperature=1.0)
    rec = run_json(capsys, ["eval", "genppl", "--samples", path, "--scorer", model_dir, "--batch-size", "2"])
    assert (rec["samples"], rec["tokens"], rec["token_ids"], rec["weights"]) == (3, 3 * SEQ, "direct", "ema")
    assert rec["samples_meta"] == {"temperature": 1.0}
    nll = token_nlls(load_model_dir(model_dir).model, ids, None).double()
    per_sample = nll.mean(1).exp()
    assert rec["sample_ppls"] == pytest.approx(per_sample.tolist(), rel=1e-6)
    assert rec["sample_ppl_mean"] == pytest.approx(per_sample.mean().item(), rel=1e-6)
    assert rec["sample_ppl_std"] == pytest.approx(per_sample.std().item(), rel=1e-6)
    assert rec["nll"] == pytest.approx(nll.mean().item(), rel=1e-6)
    assert rec["unigram_entropy_mean"] < math.log(SEQ)


def test_genppl_retokenizes_text_samples(capsys, tmp_path, model_dir):
    path = tmp_path / "samples.txt"
    path.write_text("The cat sat on the mat.\n\nA second, longer sample of text here.\n", encoding="utf-8")
    rec = run_json(capsys, ["eval", "genppl", "--samples", str(path), "--scorer", model_dir])
    assert (rec["samples"], rec["token_ids"]) == (2, "retokenized")
    assert rec["tokens"] == 7 + 9


def test_genppl_samples_from_a_model_then_scores_them(capsys, tmp_path, model_dir):
    saved = tmp_path / "drawn.json"
    argv = ["eval", "genppl", "--model", model_dir, "--scorer", model_dir, "--num-samples", "3"]
    argv += ["--length", "16", "--steps", "4", "--batch-size", "2", "--seed", "1"]
    rec = run_json(capsys, [*argv, "--save-samples", str(saved)])
    assert (rec["samples"], rec["tokens"], rec["token_ids"]) == (3, 48, "direct")
    assert run_json(capsys, [*argv, "--save-samples", str(saved), "--force"])["sample_ppls"] == rec["sample_ppls"]
    assert rec["samples_meta"]["steps"] == 4 and rec["samples_file"] == f"model:{model_dir}"
    again = run_json(capsys, argv)
    assert again["sample_ppls"] == rec["sample_ppls"]
    from_file = run_json(capsys, ["eval", "genppl", "--samples", str(saved), "--scorer", model_dir])
    assert from_file["sample_ppls"] == pytest.approx(rec["sample_ppls"], rel=1e-6)


def test_genppl_samples_do_not_depend_on_the_batch_size(capsys, tmp_path, model_dir):
    """Sample i is seeded as sample i of --seed in whatever batch it is drawn: --batch-size 1 and 3 save the
    same samples, the same as one `aogpt sample --num-samples 5` with the same seed; --seed 2 draws other ones
    (none of them: seeds s + i would have shared four)."""
    saved = {}
    for batch in ("1", "3"):
        saved[batch] = tmp_path / f"b{batch}.json"
        argv = ["eval", "genppl", "--model", model_dir, "--scorer", model_dir, "--num-samples", "5", "--length", "12"]
        run_json(
            capsys, [*argv, "--steps", "3", "--batch-size", batch, "--seed", "1", "--save-samples", str(saved[batch])]
        )
    tokens = [json.loads(saved[b].read_text())["tokens"] for b in ("1", "3")]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 5
    sample = ["sample", "--model", model_dir, "--num-samples", "5", "--length", "12", "--steps", "3", "--no-progress"]
    assert run_json(capsys, [*sample, "--seed", "1"])["tokens"] == tokens[0]
    other = run_json(capsys, [*sample, "--seed", "2"])["tokens"]
    assert not {tuple(t) for t in other} & {tuple(t) for t in tokens[0]}


def test_genppl_scores_speculative_samples(capsys, model_dir):
    argv = ["eval", "genppl", "--model", model_dir, "--scorer", model_dir, "--num-samples", "3"]
    argv += ["--length", "16", "--speculative", "auto", "--batch-size", "2", "--seed", "1"]
    rec = run_json(capsys, argv)
    meta = rec["samples_meta"]
    assert rec["samples"] == 3 and meta["speculative"] == "auto" and meta["steps"] == 16
    assert 2 <= meta["forward_passes"] <= 32  # two batches, at most one forward per token of a sample
    assert run_json(capsys, argv)["sample_ppls"] == rec["sample_ppls"]


def test_genppl_errors(capsys, tmp_path, model_dir, monkeypatch):
    ids = [[1, 2, 3, 4]]
    other = sampler_json(tmp_path / "other.json", ids)
    data = json.loads(open(other).read())
    data["tokenizer"] = "llama"
    (tmp_path / "other.json").write_text(json.dumps(data))
    base = ["eval", "genppl", "--scorer", model_dir]
    assert "missing.json' does not exist" in run_error(capsys, [*base, "--samples", str(tmp_path / "missing.json")])
    msg = run_error(capsys, [*base, "--samples", other, "--tokens", "direct"])
    assert "does not use the samples' llama vocabulary" in msg
    assert "cannot be decoded here" in run_error(capsys, [*base, "--samples", other])
    vocab97 = tmp_path / "vocab97"
    save_model(tiny_model(vocab_size=97, max_seq_len=SEQ, dim=32, preset="eval"), str(vocab97))
    good = sampler_json(tmp_path / "good.json", ids)
    msg = run_error(capsys, ["eval", "genppl", "--samples", good, "--scorer", str(vocab97)])
    assert "97-token vocabulary" in msg
    long = sampler_json(tmp_path / "long.json", [list(range(SEQ + 1))])
    assert f"above the {SEQ} positions" in run_error(capsys, [*base, "--samples", long])
    assert "needs --num-samples" in run_error(capsys, ["eval", "genppl", "--model", model_dir, "--scorer", model_dir])
    assert "needs --model" in run_error(capsys, [*base, "--samples", good, "--num-samples", "2"])
    assert "--speculative needs --model" in run_error(capsys, [*base, "--samples", good, "--speculative", "2"])
    drawn = ["eval", "genppl", "--model", model_dir, "--scorer", model_dir, "--num-samples", "2", "--speculative"]
    assert "--speculative 99 is not allowed" in run_error(capsys, [*drawn, "99"])
    assert "--steps does not apply" in run_error(capsys, [*drawn, "2", "--steps", "4"])
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)
    msg = run_error(capsys, ["eval", "genppl", "--samples", good, "--scorer", "hf:gpt2-large"])
    assert "needs the `transformers` package" in msg


def test_data_counts_without_a_model(capsys, text_file):
    rec = run_json(capsys, ["eval", "data", "--dataset", text_file, "--seq-len", "16"])
    assert rec["documents"] == 12 and rec["chunks"] == rec["tokens"] // 16
    assert rec["dropped_tokens"] == rec["tokens"] - 16 * rec["chunks"]


def test_genppl_reads_aogpt_sample_json(capsys, tmp_path, model_dir, monkeypatch):
    """The real `aogpt sample --json` output, redirected to a file, is accepted by --samples."""
    pytest.importorskip("aogpt_plugin.sampler.cli")
    argv = ["sample", "--model", model_dir, "--num-samples", "2", "--length", "12", "--steps", "3", "--seed", "4"]
    assert cli.main([*argv, "--json", "--no-progress"]) == 0
    drawn = json.loads(capsys.readouterr().out)
    path = tmp_path / "sampled.json"
    path.write_text(json.dumps(drawn), encoding="utf-8")
    rec = run_json(capsys, ["eval", "genppl", "--samples", str(path), "--scorer", model_dir])
    assert (rec["samples"], rec["tokens"], rec["token_ids"]) == (2, 24, "direct")
    assert "tokens" not in rec["samples_meta"] and rec["samples_meta"]["steps"] == 3
    nll = token_nlls(load_model_dir(model_dir).model, torch.tensor(drawn["tokens"]), None).double()
    assert rec["sample_ppls"] == pytest.approx(nll.mean(1).exp().tolist(), rel=1e-6)


# ---- faults: every one is a single `error:` line, before any work where the input allows -------------
def test_an_overflowing_perplexity_is_inf_and_null_in_json(capsys, tmp_path, text_file):
    path = tmp_path / "exploded"
    save_model(tiny_model(vocab_size=GPT2_VOCAB, max_seq_len=SEQ, dim=32, scale=3e4, preset="eval"), str(path))
    argv = ["eval", "ppl", "--model", str(path), "--dataset", text_file, "--order", "l2r", "--seq-len", "16"]
    assert cli.main(argv) == 0
    assert " ppl inf " in capsys.readouterr().out
    record = run_json(capsys, argv)
    assert record["nll"] > 709 and record["ppl"] is None  # exp() overflows a float; JSON has no infinity


def test_non_utf8_text_and_incomplete_configs_are_one_line_errors(capsys, tmp_path, model_dir):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    line = run_error(capsys, ["eval", "ppl", "--model", model_dir, "--dataset", str(binary), "--order", "l2r"])
    assert "binary.txt' is not UTF-8 text" in line
    samples = tmp_path / "samples.txt"
    samples.write_bytes(b"caf\xe9 au lait\n")
    line = run_error(capsys, ["eval", "genppl", "--samples", str(samples), "--scorer", model_dir])
    assert "samples.txt' is not UTF-8 text" in line
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"format": "aogpt-converted", "tokenizer": "gpt2"}))
    line = run_error(capsys, ["eval", "ppl", "--model", str(broken), "--dataset", "ptb", "--order", "l2r"])
    assert "bad model_args in config.json ('model_args')" in line


def test_an_unwritable_save_samples_path_fails_before_sampling(capsys, tmp_path, model_dir, monkeypatch):
    import aogpt_plugin.sampler as sampler

    monkeypatch.setattr(sampler, "generate", lambda *a, **k: pytest.fail("sampled before checking the output path"))
    argv = ["eval", "genppl", "--model", model_dir, "--scorer", model_dir, "--num-samples", "2", "--length", "8"]
    line = run_error(capsys, [*argv, "--save-samples", str(tmp_path / "no" / "such" / "dir" / "s.json")])
    assert "--save-samples" in line and "its folder" in line and "does not exist" in line
    line = run_error(capsys, [*argv, "--save-samples", str(tmp_path)])
    assert "is a folder; give a file path" in line
    mine = tmp_path / "mine.json"  # reported: an existing file was overwritten without --force
    mine.write_text("the user's samples")
    line = run_error(capsys, [*argv, "--save-samples", str(mine)])
    assert line == f"error: --save-samples '{mine}' already exists; pass --force to replace it"
    assert mine.read_text() == "the user's samples"
    line = run_error(capsys, [*argv, "--save-samples", "/dev/full"])
    assert "is a character device, not a file" in line


def test_a_prepared_folder_whose_shard_changed_is_refused_as_training_refuses_it(capsys, tmp_path, model_dir):
    """`aogpt data prepare`'s folder as --dataset: a shard with one byte changed (same size) is one line naming
    it, before the model loads; `--no-verify-data` scores it anyway; `aogpt eval data` checks it the same way."""
    from aogpt_plugin.data.prepare import prepare

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Document {i}: the market of town {i}."}) + "\n" for i in range(30)))
    folder = tmp_path / "prepared"
    prepare(str(corpus), str(folder), shard_docs=10)
    argv = ["eval", "ppl", "--model", model_dir, "--dataset", str(folder), "--order", "l2r", "--json"]
    assert cli.main(argv) == 0  # an intact folder scores
    capsys.readouterr()
    shard = folder / "shard-00001.jsonl"
    data = shard.read_bytes()
    shard.write_bytes(data.replace(b"market", b"marker", 1))
    assert len(shard.read_bytes()) == len(data)
    for command in (argv, ["eval", "data", "--dataset", str(folder)]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0].startswith("verifying 1 of the 3 shards") and len(err) == 2, err  # the progress line first
        assert err[1].startswith("error: --dataset=") and "shard shard-00001.jsonl does not match the sha256" in err[1]
        assert err[1].endswith("(--no-verify-data reads it anyway)")
    assert cli.main([*argv, "--no-verify-data"]) == 0


def test_ppl_left_to_right_of_a_converted_gpt2_is_transformers_loss(capsys, tmp_path):
    """`aogpt convert --from-hf` then `aogpt eval ppl --order l2r`: the mean NLL is transformers' loss of
    the GPT-2 on the same chunks, each read after <|endoftext|> (every token scored, as our [None] slot does)."""
    pytest.importorskip("transformers")
    from conftest import tiny_gpt2

    from aogpt_plugin.data.tokenizer import TiktokenTokenizer
    from aogpt_plugin.eval.benchmarks import load_documents, pack_documents

    gpt2 = tiny_gpt2(tmp_path / "hf")
    assert cli.main(["convert", "--from-hf", str(tmp_path / "hf"), str(tmp_path / "ao")]) == 0
    capsys.readouterr()
    record = run_json(
        capsys,
        ["eval", "ppl", "--model", str(tmp_path / "ao"), "--dataset", "wikitext2", "--order", "l2r"]
        + ["--seq-len", "32", "--max-chunks", "6", "--no-progress"],
    )
    chunks = pack_documents(load_documents("wikitext2").texts, TiktokenTokenizer("gpt2"), 32).chunks[:6]
    ids = torch.cat([torch.full((6, 1), gpt2.config.bos_token_id), chunks], dim=1)
    with torch.no_grad():
        loss = gpt2(ids, labels=ids).loss.item()
    assert record["tokens"] == 6 * 32 and record["order"] == "l2r"
    assert abs(record["nll"] - loss) < 1e-5, (record["nll"], loss)
