"""Hugging Face formats: the checkpoint names and ``config.json`` keys of other libraries, kept in this package.

Nothing here builds a model: each family module converts plain data in both directions, so that the model
classes above (``companion.models.GPT``) call down into this package and never the other way round.

- :mod:`~companion.models.hf.common` -- a strict state dict (a missing key names the checkpoint and the key),
  layer counting, and ``load_into(model, state, source)``, which copies a converted state dict into a model
  and refuses missing, unexpected or misshapen weights.
- :mod:`~companion.models.hf.gpt2`, :mod:`~companion.models.hf.llama`, :mod:`~companion.models.hf.mixtral`,
  :mod:`~companion.models.hf.qwen3`, :mod:`~companion.models.hf.deepseek_v3` -- one family each:
  ``config_from_hf`` / ``config_to_hf`` (``config.json`` <-> ``ModelConfig``), ``to_companion`` /
  ``from_companion`` (state dicts, their names <-> ours), and ``shape_differences(config)``, the fields in which
  a ``ModelConfig`` differs from the family (empty: it can be saved as one).
- :mod:`~companion.models.hf.quantized` -- FP8 weights with block scales (DeepSeek-V3's release) dequantised on
  load; every other ``quantization_config`` refused by name.
- :mod:`~companion.models.hf.folder` -- model folders on disk: ``read_folder`` (config.json, safetensors or
  ``pytorch_model.bin``, shards, ``tokenizer.json``) and ``write_folder``, dispatching on ``model_type``
  through :data:`~companion.models.hf.folder.FAMILIES`.

Checked in tests/test_hf_equivalence.py and tests/test_pretrained.py against ``transformers`` models built
from small random configs, in both directions; nothing is downloaded.
"""

__all__: list[str] = []  # a package of conversion modules; import them by name
