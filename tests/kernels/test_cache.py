"""kernels/_cache.py: Numba's cache files are dropped exactly when a kernel source changed."""

from __future__ import annotations

from pathlib import Path

from kernels import _cache


def _package(root: Path) -> tuple[Path, Path, list[Path]]:
    package = root / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "_vmath.py").write_text("A = 1\n")
    (package / "sub").mkdir()
    (package / "sub" / "loops.py").write_text("B = 2\n")
    cached = [
        package / "__pycache__" / "x.f-1.py311.nbi",
        package / "__pycache__" / "x.f-1.py311.1.nbc",
    ]
    return package, package / "__pycache__" / "stamp", cached


def _fill(files: list[Path]) -> None:
    for path in files:
        path.write_bytes(b"cache")


def test_a_changed_source_drops_the_cache_and_an_unchanged_one_keeps_it(tmp_path):
    package, stamp, cached = _package(tmp_path)
    _fill(cached)
    assert _cache.invalidate_if_stale(package, stamp)  # no stamp yet: unknown provenance
    assert not any(path.exists() for path in cached)
    assert stamp.read_text() == _cache.sources_digest(package)

    _fill(cached)
    assert not _cache.invalidate_if_stale(package, stamp)
    assert all(path.exists() for path in cached)

    (package / "sub" / "loops.py").write_text("B = 3\n")  # another file than the cache's
    assert _cache.invalidate_if_stale(package, stamp)
    assert not any(path.exists() for path in cached)
    assert not _cache.invalidate_if_stale(package, stamp)


def test_the_digest_sees_names_and_contents(tmp_path):
    package, _, _ = _package(tmp_path)
    before = _cache.sources_digest(package)
    (package / "sub" / "loops.py").rename(package / "sub" / "other.py")
    assert _cache.sources_digest(package) != before


def test_importing_kernels_leaves_a_current_stamp():
    assert _cache.STAMP.read_text() == _cache.sources_digest()
