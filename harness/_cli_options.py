"""Generate argparse flags from a pydantic model so each option is defined once (its field)."""

import argparse
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _base_type(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else str
    return annotation


def flag_for(name: str, field: FieldInfo, prefix: str | None = None) -> str:
    """The flag of a field: its own (``json_schema_extra={"flag": ...}``), else ``--NAME``, in a
    section ``--SECTION-NAME``."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "flag" in extra:
        return "--" + str(extra["flag"])
    return "--" + (f"{prefix}_{name}" if prefix else name).replace("_", "-")


def _section(field: FieldInfo) -> type[BaseModel] | None:
    kind = field.annotation
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def add_config_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    unprefixed: frozenset[str] = frozenset(),
    skip: frozenset[str] = frozenset(),
) -> None:
    """add_model_flags for a config with sections (fields that are models themselves): a section's
    fields become ``--SECTION-FIELD`` (no prefix for the sections in ``unprefixed``), their values
    come back nested from ``config_values``."""
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        if (section := _section(field)) is not None:
            for sub, subfield in section.model_fields.items():
                _add_flag(
                    parser,
                    f"{name}.{sub}",
                    subfield,
                    flag_for(sub, subfield, None if name in unprefixed else name),
                    optional=True,
                )
        else:
            _add_flag(parser, name, field, flag_for(name, field), optional=True)


def config_values(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The flags given (None: not given), nested by section as ``model`` is."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if (section := _section(field)) is not None:
            values[name] = {sub: _value(getattr(args, f"{name}.{sub}", None)) for sub in section.model_fields}
        else:
            values[name] = _value(getattr(args, name, None))
    return values


def _value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


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
        _add_flag(
            parser, name, field, "--" + (rename or {}).get(name, name).replace("_", "-"), optional=optional
        )


def _add_flag(
    parser: argparse.ArgumentParser, dest: str, field: FieldInfo, flag: str, *, optional: bool
) -> None:
    kind = _base_type(field.annotation)
    help_text = field.description or ""
    if field.default not in (None, ()) and not field.is_required():
        help_text += f" [default: {field.default}]"
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    metavar = str(extra["metavar"]) if "metavar" in extra else None
    if kind is bool:
        parser.add_argument(
            flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help_text
        )
    elif typing.get_origin(kind) is tuple:
        parser.add_argument(
            flag,
            dest=dest,
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
            dest=dest,
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
