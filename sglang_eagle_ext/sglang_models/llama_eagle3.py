"""Registry module for ``SGLANG_EXTERNAL_MODEL_PACKAGE``: our class under its SGLang name."""

from ..sglang_model import LlamaForCausalLMEagle3

EntryClass = [LlamaForCausalLMEagle3]
