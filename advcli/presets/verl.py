"""verl: ``trainer.rollout_data_dir`` (and ``validation_data_dir``) → ``{step}.jsonl``.

One line per rollout: ``input`` and ``output`` (decoded text), ``gts``, ``score`` (the reward),
``step``, and the reward function's extra fields. Two trainers write it:

- V1 (verl 0.9 on) adds ``uid`` = ``{prompt uuid}_{session}_{output}``: the group is the prompt
  uuid, the rollout ``{uuid}_{session}``, and the output number a segment of it (an agent loop
  that compacts its context writes several outputs, each with the final reward);
- the legacy trainer writes no uid: a group is the rows of one step with the same ``input``
  text. Two dataset rows with the same prompt text would merge (verl scored them apart, and
  ``balance_batch`` scatters their rows): a text with a multiple of the common row count is
  refused unless ``--merge-repeated-prompts`` says to merge.

The legacy writer turns some numbers into text ("0.5") and writes NaN bare: both are read.
"""

from __future__ import annotations

from advcli.errors import DataError, where
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    json_records,
    need,
    number,
    step_of,
)

UID = r"^(.+)_(\d+)_(\d+)$"
TEXT = ("input", "output", "gts", "uid", "request_id")  # fields that are text, whatever they hold


def numbers_from_text(df: pl.DataFrame) -> pl.DataFrame:
    """The legacy writer's numbers written as text (``default=str``: "0.02") as numbers: every
    text field but the prompt, response and ids whose values all read as numbers."""
    out = {}
    for name in df.columns:
        column = df[name]
        if name in TEXT or column.dtype != pl.String:
            continue
        numbers = column.str.strip_chars().cast(pl.Float64, strict=False)
        if numbers.null_count() == column.null_count() and column.null_count() < len(column):
            out[name] = numbers
    return df.with_columns(**out) if out else df


def refuse_repeated_prompts(path: str, lines: np.ndarray, prompt: pl.Series) -> None:
    """Refuse a legacy dump where a step's prompt text has a multiple of the common number of
    rows (rollout.n): two dataset rows with one text, which verl scored as two groups and its
    dump, without a uid and with rows reordered (balance_batch), cannot tell apart."""
    counts = prompt.value_counts()
    sizes = counts["count"].to_numpy()
    values, times = np.unique(sizes, return_counts=True)
    common = int(values[np.argmax(times)])
    merged = np.flatnonzero((sizes >= 2 * common) & (sizes % common == 0))
    if not len(merged):
        return
    text = counts[prompt.name][int(merged[0])]
    row = int(np.flatnonzero((prompt == text).to_numpy())[0])
    step, _, shown = text.partition(":")
    shown = shown if len(shown) <= 60 else "..." + shown[-57:]  # the question ends it
    msg = (
        f"{where(path, int(lines[row]), 'input', line=True)}: {int(sizes[merged[0]])} rows of "
        f"step {step} share the prompt {shown!r}, where the others have {common}: several dataset "
        "rows with one text, which verl scored as separate groups and its legacy dump (no uid) "
        "cannot tell apart. Hint: pass --merge-repeated-prompts to score them as one group "
        "(not verl's numbers), or dump with verl's V1 trainer, which writes the uid"
    )
    raise DataError(msg)


class Verl(Preset):
    name = "verl"
    framework = "verl"
    switch = "trainer.rollout_data_dir=DIR (trainer.validation_data_dir=DIR for validation)"
    writes = "DIR/{step}.jsonl"
    patterns = ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst")
    marks = (frozenset({"input", "output", "score", "step"}),)
    convention = "verl"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = numbers_from_text(frame(records))
        need(path, set(df.columns), ["score"], self.framework)
        step = (
            df["step"]
            if "step" in df.columns
            else pl.Series([step_of(path, r"(\d+)\.jsonl")] * df.height)
        )
        if "uid" in df.columns:
            parts = df["uid"].cast(pl.String).str.extract_groups(UID)
            bad = parts.struct.field("1").is_null().to_numpy()
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                msg = (
                    f"{where(path, int(lines[row]), 'uid', line=True)}: {df['uid'][row]!r} is "
                    "not verl V1's {prompt uuid}_{session}_{output}. Hint: check the file"
                )
                raise DataError(msg)
            prompt = parts.struct.field("1")
            ids = {
                "prompt_id": prompt,
                "rollout_id": prompt + "_" + parts.struct.field("2"),
                "segment_index": parts.struct.field("3").cast(pl.Int64),
            }
        else:
            need(path, set(df.columns), ["input"], self.framework)
            scope = step.cast(pl.String) + ":"
            prompt = scope + df["input"].cast(pl.String)
            if not options.merge_repeated_prompts:
                refuse_repeated_prompts(path, lines, prompt)
            ids = {"prompt_id": prompt, "rollout_id": scope + pl.Series(lines).cast(pl.String)}
        canonical = {**ids, "reward": number(df, "score", path, lines), "step": step,
                     "batch": step.cast(pl.String)}  # fmt: skip
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        return Converted(table.to_arrow(), lines)
