"""torchtitan 0.2.2 glue: the TrainSpec (spec.py), the config parser, the run's settings read off the
JobConfig (settings.py), the builders' signatures (data.py, optimizers.py, parallelize.py), the
checkpoint save wrap (checkpoint.py) and what the launcher needs (launch.py: CPU shims, parse, run).
Each file adapts shared modules of training/ to 0.2.2's API."""
