"""`python -m aogpt_plugin.train ARGS` (also under torchrun): runs the training launcher,
training/launcher.py, as `python -m aogpt_plugin.training.launcher ARGS` would. Kept under this name
for the recipes, scripts, printed resume commands and `aogpt train` that use it."""

import runpy

# How a one-process run was started, for the commands its messages print (a stop's resume command):
# `aogpt train` sets it to "aogpt train" before it runs this module (cli.py); unset, "python -m aogpt_plugin.train".
TRAIN_COMMAND_ENV = "AOGPT_TRAIN_COMMAND"

if __name__ == "__main__":
    runpy.run_module("aogpt_plugin.training.launcher", run_name="__main__")
