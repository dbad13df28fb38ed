"""Generate argparse flags from a pydantic model so each option is defined once (its field)."""

import argparse
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def _base_type(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else str
    return annotation


def add_model_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    skip: frozenset[str] = frozenset(),
    optional: bool = False,
    rename: dict[str, str] | None = None,
) -> None:
    """One --flag per field; defaults are None so that 'not given' leaves the config file's value.

    ``rename`` gives a field another flag name (``models`` -> ``--model``, given once per model).
    """
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        flag = "--" + (rename or {}).get(name, name).replace("_", "-")
        kind = _base_type(field.annotation)
        help_text = field.description or ""
        if field.default not in (None, ()) and not field.is_required():
            help_text += f" [default: {field.default}]"
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        metavar = str(extra["metavar"]) if "metavar" in extra else None
        if kind is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif typing.get_origin(kind) is tuple:
            parser.add_argument(
                flag,
                dest=name,
                action="append",
                default=None,
                metavar=metavar or "ARG",
                help=help_text + " (repeatable)",
            )
        else:
            conv = {int: int, float: float, Path: Path}.get(kind, str)
            choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
            parser.add_argument(
                flag,
                dest=name,
                type=conv,
                choices=choices,
                default=None,
                metavar=metavar,
                required=field.is_required() and not optional,
                help=help_text,
            )


def model_values(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    values = {name: getattr(args, name, None) for name in model.model_fields}
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items()}
