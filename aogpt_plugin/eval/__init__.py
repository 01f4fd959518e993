"""The paper's evaluations: zero-shot perplexity (left to right, any order, context-order ensembles) and
generation perplexity with unigram entropy; `aogpt eval {ppl,genppl,data}` (docs/evaluation.md).
Imports no torchtitan."""
