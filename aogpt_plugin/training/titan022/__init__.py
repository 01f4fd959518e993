"""torchtitan 0.2.2 glue: the TrainSpec, the config parser, the builder signatures, the CPU module list
and the checkpoint save wrap. Each file adapts one shared module of training/ to 0.2.2's API."""
