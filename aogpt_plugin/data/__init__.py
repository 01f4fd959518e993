"""Where tokens come from: the tokenizer and local text corpora (shared by training, sampling and evaluation)."""
