"""The seventh probe's cases (#71) and the sixth probe's open ones outside its helper's files:
each failed before its fix."""


from nca_interp import fetch
from tests.unit.test_fetch import NAME, fake_fetched, refetch  # noqa: F401 (a fixture)


def test_the_fetch_damage_note_states_only_the_fact(tmp_path, refetch, capsys):  # noqa: F811
    """H2v: `fetch --verify` on a copy with one flipped byte quoted verify_folder's advice,
    "run `python -m nca_interp.fetch ... --verify` and use (or copy here) the cache's folder",
    while doing just that, and called the --cache folder "outside the cache"."""
    folder = fake_fetched(tmp_path / "models" / NAME)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    assert fetch.fetch(NAME, tmp_path, verify=True) == folder and refetch
    err = capsys.readouterr().err
    assert "is damaged (" in err and "corrupt" in err and "fetching it again" in err, err
    assert "python -m nca_interp.fetch" not in err and "outside the cache" not in err, err
