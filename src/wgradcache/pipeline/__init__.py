"""The pipeline: plan, compile, publish, verify, select, refresh: the stages that join the
layers below (jobs, wgrad, compile, cache) into commands."""
