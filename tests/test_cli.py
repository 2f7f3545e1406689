from dataclasses import dataclass, field

from nca_interp.cli import parse_config, to_dict


@dataclass
class Cfg:
    name: str = "a"
    n: int = 1
    x: float | None = None
    dims: tuple[int, ...] = (6, 6)
    items: list[str] = field(default_factory=lambda: ["p", "q"])
    flag: bool = False


def test_types_flags_and_round_trip():
    c = parse_config(Cfg, ["--n", "3", "--x", "0.5", "--dims", "8,8", "--items", "a,b", "--flag"])
    assert (c.n, c.x, c.dims, c.items, c.flag) == (3, 0.5, (8, 8), ["a", "b"], True)
    assert parse_config(Cfg, ["--x", "none", "--flag", "false"]).x is None
    assert not parse_config(Cfg, ["--flag", "false"]).flag
    assert Cfg(**{**to_dict(c), "dims": tuple(to_dict(c)["dims"])}) == c


def test_positional_list():
    c = parse_config(Cfg, ["u", "v"], positional="items")
    assert c.items == ["u", "v"]
