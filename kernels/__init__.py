"""Triton tree-building and tree-verification kernels (installed as `sglang_eagle_ext.kernels`)."""
