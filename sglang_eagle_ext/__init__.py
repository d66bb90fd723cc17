"""EAGLE-3 speculative decoding in stock SGLang for every drafter format.

Data flows one way: a checkpoint directory is read into one canonical, validated
:class:`~sglang_eagle_ext.drafter.spec.DrafterSpec` (plus canonical tensors); the SGLang model class,
the plain-PyTorch reference drafter and the command-line tools are all built from it.
"""

__version__ = "0.1.0"
