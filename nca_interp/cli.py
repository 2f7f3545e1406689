"""One dataclass config per entry point: argparse from its fields, JSON round trip.

Field help lives in `field(metadata={"help": ...})`. Tuples are written `6,6`; lists `a,b,c`;
`X | None` fields accept `none`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing


def _parser_for(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        parse = _parser_for(inner)
        return lambda s: None if s.lower() == "none" else parse(s)
    if tp is bool:
        return lambda s: s.lower() in ("1", "true", "yes", "y")
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return lambda s: tuple(item(x) for x in s.split(",") if x)
    if origin is list:
        item = typing.get_args(tp)[0]
        return lambda s: [item(x) for x in s.split(",") if x]
    return tp


def parse_config(cls, argv: list[str] | None, description: str | None = None,
                 positional: str | None = None):
    """Build `cls` from command-line `argv` (None: sys.argv). `positional` names a list field
    that may also be given as bare arguments."""
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) else default
        flag = {"nargs": "?", "const": True} if hints[f.name] is bool else {}
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name,
                            type=_parser_for(hints[f.name]), default=default, **flag,
                            help=f"{f.metadata.get('help', '')} (default: {shown})")
    if positional:
        parser.add_argument("_positional", nargs="*", metavar=positional.upper(),
                            help=f"same as --{positional}")
    ns = vars(parser.parse_args(argv))
    extra = ns.pop("_positional", None)
    if extra:
        ns[positional] = extra
    return cls(**ns)


def to_dict(cfg) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=list))
