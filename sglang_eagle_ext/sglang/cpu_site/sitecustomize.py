"""Put this folder on ``PYTHONPATH`` to run stock SGLang on a CPU-only host: every process,
spawned SGLang schedulers included, installs the CPU import shims at start-up."""

from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

cpu_shims.install()
