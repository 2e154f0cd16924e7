import shutil
from pathlib import Path

from cluster.store.schema import CollectionIdentity
from cluster.weights import weights_fingerprint


def model_dir(root: Path) -> Path:
    (root / "1_Pooling").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(b"\x00" * 64)
    (root / "config.json").write_text('{"hidden_size": 8}')
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (root / "README.md").write_text("card")
    return root


def test_the_fingerprint_follows_the_files_that_shape_vectors(tmp_path: Path) -> None:
    a = model_dir(tmp_path / "a")
    first = weights_fingerprint(str(a))
    assert len(first) == 16 and weights_fingerprint(str(shutil.copytree(a, tmp_path / "copy"))) == first
    (a / "README.md").write_text("another card")
    assert weights_fingerprint(str(a)) == first, "documentation does not change the vectors"
    (a / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert weights_fingerprint(str(a)) != first, "pooling does"
    assert weights_fingerprint("some-org/not-on-disk") == ""


def test_a_collection_without_a_recorded_fingerprint_is_not_refused_for_it() -> None:
    new = CollectionIdentity("m", 384, "c", "b", "aaaa")
    assert new.same_weights(CollectionIdentity("m", 384, "c", "b", "aaaa"))
    assert not new.same_weights(CollectionIdentity("m", 384, "c", "b", "bbbb"))
    assert new.same_weights(CollectionIdentity("m", 384, "c", "b"))  # from before fingerprints: unknown
    assert not new.same_weights(CollectionIdentity("other", 384, "c", "b", "aaaa"))
    legacy = CollectionIdentity.from_properties(CollectionIdentity("m", 384, "c", "b").properties())
    assert legacy is not None and legacy.weights == ""
    assert CollectionIdentity.from_properties(new.properties()) == new
