"""The terminal summary says which SGLang releases ``test_release_source`` checked."""

import pytest

# The line test_release_source's fixture leaves for the summary (which wheels it read).
RELEASE_FACTS = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, config):
    line = config.stash.get(RELEASE_FACTS, None)
    if line:
        terminalreporter.write_sep("-", "release facts")
        terminalreporter.write_line(line)
