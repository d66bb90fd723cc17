"""How SGLang's server is started: ``sglang serve``.

Every supported release's ``python -m sglang.launch_server`` warns that ``sglang serve`` is the
recommended entrypoint (its ``__main__``); ``sglang`` is the console script ``sglang.cli.main:main``,
whose ``serve`` loads the plugins (this package's among them) and runs ``launch_server.run_server``
on ``prepare_server_args`` of the same options (:data:`SERVE`). The ``sglang`` module has no
``__main__``, so the command names this environment's console script, which runs this
environment's interpreter: the CPU shims' variables on its line reach it as they reached
``python -m``.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import sysconfig

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Target

_EVERY = releases.EVERY_RELEASE.releases
_SERVE_FUNCTIONS = ("sglang.cli.serve.serve", "sglang.cli.serve._run_llm")  # _run_llm: 0.5.21+
SERVE = (Target(_EVERY, "sglang.cli.serve", "serve", imported_in=("sglang.cli.main.main",)),
         Target(_EVERY, "sglang.srt.plugins", "load_plugins", imported_in=("sglang.cli.serve.serve",)),
         Target(_EVERY, "sglang.srt.server_args", "prepare_server_args", imported_in=_SERVE_FUNCTIONS),
         Target(_EVERY, "sglang.launch_server", "run_server", imported_in=_SERVE_FUNCTIONS))
CONSOLE_SCRIPT = "sglang"
LEGACY_LAUNCHER = ("-m", "sglang.launch_server")


def console_script() -> str | None:
    """This environment's ``sglang`` script: where pip recorded it for the installed SGLang, else
    the scripts folder of this interpreter's install scheme (where ``pip install sglang`` puts it),
    when a file is there; None where neither is."""
    try:
        files = importlib.metadata.distribution("sglang").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    recorded = [os.path.normpath(file.locate()) for file in files
                if file.name == CONSOLE_SCRIPT and file.parent.name in ("bin", "Scripts")]
    for path in recorded + [os.path.join(sysconfig.get_path("scripts"), CONSOLE_SCRIPT)]:
        if os.path.isfile(path):
            return path
    return None


def server_command(installed: bool = True) -> list[str]:
    """The start of the command that runs SGLang's server: ``<scripts>/sglang serve``; where SGLang
    is not installed yet, the script ``pip install`` writes; where it is installed without one,
    ``python -m sglang.launch_server``, which runs the same server (and warns)."""
    script = console_script()
    if script is None and not installed:
        script = os.path.join(sysconfig.get_path("scripts"), CONSOLE_SCRIPT)
    if script is None:
        return [sys.executable, *LEGACY_LAUNCHER]
    return [script, "serve"]
