"""One tiny target and one distilled drafter (the demo's settings) per test session, shared by the
modules here (building them is most of these tests' time). ``build_*`` reuse what is built."""

import pytest

from sglang_eagle_ext import cpu_shims
from sglang_eagle_ext.tiny.distill import DistillSettings, build_tiny_drafter
from sglang_eagle_ext.tiny.target import TinyTargetSettings, build_tiny_target

cpu_shims.install()


@pytest.fixture(scope="session")
def shared_target(tmp_path_factory):
    return build_tiny_target(tmp_path_factory.getbasetemp() / "tiny-target", TinyTargetSettings())


@pytest.fixture(scope="session")
def shared_drafter(tmp_path_factory, shared_target):
    return build_tiny_drafter(str(tmp_path_factory.getbasetemp() / "tiny-drafter"), shared_target,
                              DistillSettings())
