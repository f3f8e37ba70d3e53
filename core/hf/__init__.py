"""Hugging Face models (`--model hf:DIR`): validate an export on every generate() step.

Importing this package imports nothing: neither torch nor transformers (they load when a
run starts), nor the run loop. An hf: run is `parity.pipeline.run_validation` with
`RunConfig(model="hf:DIR", hf=HfOptions(...))`; its source is `parity.hf.source.HfSource`.
"""
