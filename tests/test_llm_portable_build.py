"""llama-cpp-python is built portably in CI and in the documented recipe: a native build on a CPU that
advertises AMX compiles ggml's AMX backend, which dies with SIGILL on the first longer prompt there."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import under_ci

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON")


def _cmake_args(text: str, where: str) -> list[str]:
    """The CMAKE_ARGS of every command in ``text`` that pip-installs or builds a wheel of llama-cpp-python
    (variables expanded). An install from the wheel folder a checked ``pip wheel`` line fills (``.ci/run`` keeps
    the portable wheel between runs) must pin that wheel's version and skip pip's cache."""
    env = dict(re.findall(r'^\s*(?:export\s+)?([A-Z_]+)="([^"]*)"\s*$', text, flags=re.M))
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        if ("pip install" in line or "pip wheel" in line) and "llama-cpp-python" in line:
            if "pip install" in line and "--find-links" in line:
                assert re.search(r"pip wheel .*llama-cpp-python", joined), f"{where}: no wheel build for {line.strip()}"
                assert "==" in line and "--no-cache-dir" in line, f"{where}: unpinned or cached install: {line.strip()}"
                continue
            m = re.search(r'CMAKE_ARGS="([^"]*)"', line)
            assert m, f"{where}: pip installs llama-cpp-python without CMAKE_ARGS: {line.strip()}"
            assert "--no-cache-dir" in line, f"{where}: a cached native wheel could be reused: {line.strip()}"
            out.append(re.sub(r"\$\{?([A-Z_]+)\}?", lambda v: env.get(v.group(1), v.group(0)), m.group(1)))
    return out


@pytest.mark.parametrize("rel", [".ci/run", "README.md"])
def test_llama_cpp_is_installed_portably(rel):
    found = _cmake_args((ROOT / rel).read_text(encoding="utf-8"), rel)
    assert found, f"{rel}: no llama-cpp-python install command"
    for args in found:
        assert all(flag in args.split() for flag in FLAGS), (rel, args)


def test_installed_llama_cpp_has_no_native_amx_backend():
    if importlib.util.find_spec("llama_cpp") is None:
        if under_ci():
            pytest.fail("CI is set but llama_cpp is not installed (.ci/run installs it)")
        pytest.skip("llama_cpp is not installed")
    r = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not re.search(r"AMX\w*\s*=\s*1", r.stdout), f"llama.cpp was built with its AMX backend: {r.stdout}"


def test_the_rule_catches_a_native_wheel_build_and_an_unpinned_cached_install():
    with pytest.raises(AssertionError, match="without CMAKE_ARGS"):
        _cmake_args("pip wheel --no-cache-dir 'llama-cpp-python>=0.3' -w w\n", "x")
    build = 'X="-DGGML_NATIVE=OFF"\nCMAKE_ARGS="$X" pip wheel --no-cache-dir llama-cpp-python -w w\n'
    with pytest.raises(AssertionError, match="unpinned or cached"):
        _cmake_args(build + 'pip install --find-links w "llama-cpp-python[server]"\n', "x")
    assert _cmake_args(build + 'pip install --no-cache-dir --find-links w "llama-cpp-python[server]==0.3.1"\n',
                       "x") == ["-DGGML_NATIVE=OFF"]
