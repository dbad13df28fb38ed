"""`harness analyze`'s options: one pydantic model, each field a flag (kept free of heavy imports:
the command line is built from it)."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class AnalyzeConfig(BaseModel):
    """``harness analyze``'s options (each a flag of the same name)."""

    model_config = ConfigDict(frozen=True)

    judge: str = Field(
        description="The judge: a checkpoint (served on demand, like eval's --model) or an "
        "OpenAI-compatible endpoint's base URL (http://HOST:PORT/v1)",
        json_schema_extra={"metavar": "CKPT|URL"},
    )
    rubric: Path | None = Field(None, description="The rubric (TOML) [default: the shipped one]")
    labels: Path | None = Field(
        None, description="Human labels (.csv with episode,label or .jsonl): the judge's agreement with them"
    )
    api_key: str | None = Field(None, description="The endpoint's API key (with a URL judge)")
    judge_model: str | None = Field(
        None, description="The model name at a URL judge [default: the first the endpoint lists]"
    )
    concurrency: int = Field(4, ge=1, le=64, description="Episodes judged at once")
