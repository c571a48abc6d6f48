"""Profile store: shipped defaults, local overlay, save/load, and the visible similarity fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qos_helpers import simple_profile

from hivebatch.errors import HivebatchError
from hivebatch.qos import ProfileStore, Shape, UnknownModelError, predict_throughput

PAPER_MODELS = ("alexnet", "googlenet", "resnet50", "inception3", "lstm", "seq2seq")
MEASURED = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf")


def test_shipped_defaults_cover_paper_and_measured_models() -> None:
    store = ProfileStore.load()
    have = {(p.name, p.gpu_type) for p in store.profiles()}
    for m in PAPER_MODELS:
        assert (m, "V100") in have and (m, "K80") in have
    for m in MEASURED:
        assert (m, "V100") in have and (m, "RTX2080Ti") in have
    for p in store.profiles():
        assert p.family and p.params_m and p.params_m > 0, p.name


def test_shipped_fitted_profiles_carry_their_holdout_error() -> None:
    for p in ProfileStore.load().profiles():
        if p.name in MEASURED:
            assert p.samples > 0
            assert p.mape_holdout is not None and p.mape_holdout <= 10.0
            assert p.extra["mape_holdout_paper_form"] > p.mape_holdout


def test_shipped_profiles_answer_every_lab_shape_in_their_batch_range() -> None:
    """No negative or absurd predictions for placements up to 4 nodes x 8 GPUs."""
    for p in ProfileStore.load().profiles():
        lo, hi = p.extra.get("local_batch_range", [16.0, 128.0])
        for w in (lo, (lo + hi) / 2, hi):
            one = predict_throughput(p, w, Shape(1, 1))
            for d in (1, 2, 3, 4):
                for g in (1, 2, 4, 8):
                    s = Shape(d, g)
                    pr = predict_throughput(p, w * s.gpus, s)
                    # scaling: more than nothing, at most perfectly linear with a margin for the noise
                    assert 0 < pr <= 1.5 * s.gpus * one, (p.name, p.gpu_type, w, str(s))


def test_exact_hit_has_no_note() -> None:
    prof, note = ProfileStore.load().get("resnet50", gpu_type="V100")
    assert (prof.name, prof.gpu_type, note) == ("resnet50", "V100", None)


def test_like_hint_is_used_and_said() -> None:
    prof, note = ProfileStore.load().get("myresnet", gpu_type="K80", like="resnet50")
    assert (prof.name, prof.gpu_type) == ("resnet50", "K80")
    assert note == "no profile for myresnet on K80; using resnet50/K80 (--like)"


def test_same_model_other_gpu_prefers_measured() -> None:
    prof, note = ProfileStore.load().get("bert", gpu_type="K80")
    assert prof.name == "bert" and prof.gpu_type in ("V100", "RTX2080Ti")
    assert "same model, other GPU" in (note or "")


def test_family_fallback_picks_nearest_parameter_count() -> None:
    store = ProfileStore.load()
    prof, note = store.get("vgg16", gpu_type="K80", family="cnn", params_m=138)
    assert prof.name == "alexnet"  # 61M is the closest CNN to 138M on K80
    assert "same family cnn" in (note or "")
    prof, _ = store.get("mobilenet", gpu_type="K80", family="cnn", params_m=4.2)
    assert prof.name == "googlenet"


def test_unknown_model_error_names_the_fix() -> None:
    with pytest.raises(UnknownModelError, match="--like"):
        ProfileStore.load().get("nosuchmodel", gpu_type="V100")
    with pytest.raises(UnknownModelError, match="no such profile"):
        ProfileStore.load().get("x", like="alsonothing")


def test_local_store_overlays_and_saves_only_local(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "profiles.json"
    store = ProfileStore.load(path)
    mine = simple_profile(t0=0.1, t_w=0.01)
    mine.name, mine.gpu_type = "resnet50", "V100"
    store.put(mine)
    store.save()
    body = json.loads(path.read_text())
    assert [p["name"] for p in body["profiles"]] == ["resnet50"]
    again = ProfileStore.load(path)
    prof, note = again.get("resnet50", "V100")
    assert note is None and prof.coefficients["t0"] == 0.1
    assert again.is_local(prof)
    assert len(again.profiles()) == len(ProfileStore.load().profiles())


def test_bad_store_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    with pytest.raises(HivebatchError, match="not valid JSON"):
        ProfileStore.load(bad)
    bad.write_text('{"profiles": [{"name": "x"}]}')
    with pytest.raises(HivebatchError, match="malformed profile"):
        ProfileStore.load(bad)


def test_save_without_path() -> None:
    with pytest.raises(HivebatchError, match="--profiles"):
        ProfileStore.load().save()
