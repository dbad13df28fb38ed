"""A judge's rubric: the classes a failed episode can be put in, each described, and what to weigh."""

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import HarnessError

DEFAULT_RUBRIC = Path(__file__).with_name("default_rubric.toml")


class RubricClass(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="The label the judge answers with.")
    description: str = Field(min_length=1, description="What puts an episode in this class.")


class Rubric(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    instructions: str = Field(min_length=1, description="What the judge is asked to do, before the classes.")
    classes: tuple[RubricClass, ...] = Field(min_length=2)

    @field_validator("classes")
    @classmethod
    def _unique(cls, classes: tuple[RubricClass, ...]) -> tuple[RubricClass, ...]:
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise ValueError(
                f"class names repeat: {', '.join(sorted({n for n in names if names.count(n) > 1}))}"
            )
        return classes

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.classes]


def load_rubric(path: Path | None) -> Rubric:
    """The rubric in ``path`` (TOML), or the default one; a bad file is one line naming it."""
    path = path or DEFAULT_RUBRIC
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise HarnessError(f"--rubric {path}: cannot read it ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HarnessError(f"--rubric {path}: not valid TOML ({exc})") from None
    try:
        return Rubric.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise HarnessError(
            f"--rubric {path}: {where}: {err['msg']} (a rubric has name, instructions and [[classes]] "
            f"with name and description; see {DEFAULT_RUBRIC})"
        ) from None
