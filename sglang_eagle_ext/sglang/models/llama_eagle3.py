"""Registry module for ``SGLANG_EXTERNAL_MODEL_PACKAGE``: our class under its SGLang name."""

from sglang_eagle_ext.sglang.model import LlamaForCausalLMEagle3

EntryClass = [LlamaForCausalLMEagle3]
