"""``SGLANG_EXTERNAL_MODEL_PACKAGE=sglang_eagle_ext.sglang.models``: the fallback activation.

SGLang imports this package (in every process, when its model registry is first imported) and
registers the ``EntryClass`` of each submodule. Importing it also applies the worker patches;
the package ``__init__`` is the one place whose errors SGLang does not swallow.

This activation comes late: the target's model runner has already read the drafter's config
with SGLang's own loader. The ``target-capture-ids`` patch corrects the taps it took from it,
but a config that loader cannot read at all (a speculators config has no ``model_type``) stops
the server before we are imported; such drafters need the entry point.
"""

from sglang_eagle_ext.sglang.plugin import activate

activate()
