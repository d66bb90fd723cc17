"""``SGLANG_EXTERNAL_MODEL_PACKAGE=sglang_eagle_ext.sglang_models``: the fallback activation.

SGLang imports this package (in every process, when its model registry is first imported) and
registers the ``EntryClass`` of each submodule. Importing it also applies the worker patches;
the package ``__init__`` is the one place whose errors SGLang does not swallow.
"""

from ..sglang_plugin import activate

activate()
