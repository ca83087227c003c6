"""Packaging hook: ship ``aitune_jit.pth`` at the top of site-packages; everything else is in pyproject.toml.

A ``.pth`` file there runs its ``import`` line at interpreter start: the one line that
lets ``AITUNE_JIT=1 python script.py`` tune a script that never imports aitune (see
``aitune_core/jit/startup.py``). Wheels hold what ``build_py`` puts at the top of
``build_lib`` in site-packages, so it is copied there.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path("aitune_core", "jit", "aitune_jit.pth")


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib, PTH.name)), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH.name))]


setup(cmdclass={"build_py": BuildPyWithPth})
